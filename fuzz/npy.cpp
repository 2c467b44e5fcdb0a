// .npy reader. The first byte chooses the element type assumed for raw void data ('<V2',
// '|V1'), as `kiln compare-tensors --raw-dtype` does; the rest is the file.
#include "common/numerics/tensor_io.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(npy) {
  using namespace kiln::numerics;
  if (size == 0) return 0;
  ReadOptions options;
  constexpr DType kRawTypes[] = {DType::bf16, DType::f16, DType::f8_e4m3, DType::f8_e5m2};
  if (data[0] < std::size(kRawTypes)) options.raw_dtype = kRawTypes[data[0]];
  const std::string_view file = kiln::fuzz::as_text(data + 1, size - 1);

  auto tensor = parse_npy(file, options);
  if (!tensor) return 0;
  if (static_cast<std::int64_t>(tensor->values.size()) != element_count(tensor->shape)) {
    kiln::fuzz::violated("the tensor read has a different number of values than its shape says");
  }
  // A tensor read from a file can be written and read back with the same shape.
  auto written = serialize_npy(*tensor);
  if (!written) kiln::fuzz::violated("a tensor read from .npy does not serialize");
  ReadOptions raw;
  raw.raw_dtype = tensor->dtype;
  auto back = parse_npy(*written, raw);
  if (!back || back->shape != tensor->shape) kiln::fuzz::violated("a serialized .npy does not read back");
  return 0;
}
