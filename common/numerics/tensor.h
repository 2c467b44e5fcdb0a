// A tensor read from a file, its elements decoded exactly to double whatever the stored format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/numerics/formats.h"

namespace kiln::numerics {

struct Tensor {
  DType dtype = DType::f32;     // the format the elements were (or will be) stored in
  std::vector<int64_t> shape;   // C order; empty for a scalar
  std::vector<double> values;   // shape's product elements, row-major
};

// Product of the dimensions (1 for a scalar).
inline int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    count *= dim;
  }
  return count;
}

// "[2, 3]": a shape as error messages show it.
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace kiln::numerics
