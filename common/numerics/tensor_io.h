// Reading and writing tensors in numpy .npy and .safetensors files.
//
// Parsing and serializing work on bytes in memory (pure); the *_file functions are the thin
// I/O shell. Every malformed input (truncated file, bad header, offsets out of range, shape
// and size disagreeing, Fortran order, big-endian data, unsupported element type) is an
// Error that says what is wrong and what to do; nothing here crashes on bad input.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/numerics/tensor.h"

namespace kiln::numerics {

struct ReadOptions {
  // Format of elements a .npy file stores without a type of its own: ml_dtypes saves
  // bfloat16 and float8 arrays as raw void types ('<V2', '|V1'). Such files are read only
  // when this is set, and its size must match. Ignored for typed data.
  std::optional<DType> raw_dtype;
  // The tensor to read from a .safetensors file; may be omitted when the file holds exactly
  // one. Ignored for .npy files, which hold one array.
  std::optional<std::string> tensor_name;
  size_t max_header_bytes = size_t{1} << 20;
  size_t max_file_bytes = size_t{4} << 30;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

enum class FileFormat { npy, safetensors };

// .npy versions 1.0, 2.0 and 3.0; little-endian, C order; f8, f4, f2, and raw V1/V2.
Result<Tensor> parse_npy(std::string_view bytes, const ReadOptions& options);

// Writes version 1.0 (2.0 when the header needs it). bf16 and fp8 are written as raw void
// types ('<V2', '|V1') as ml_dtypes does. Values are rounded to the tensor's dtype (nearest
// even, non-saturating) if they are not representable in it.
Result<std::string> serialize_npy(const Tensor& tensor);

// Names of the tensors in a .safetensors file, sorted, after validating its header.
Result<std::vector<std::string>> safetensors_names(std::string_view bytes, const ReadOptions& options);

// One tensor (options.tensor_name, or the only one) of dtype F64, F32, F16, BF16, F8_E4M3 or
// F8_E5M2. The whole header is validated, including that the tensors' byte ranges tile the
// data section exactly.
Result<Tensor> parse_safetensors(std::string_view bytes, const ReadOptions& options);

// Tensors laid out in the given order; the header is padded to a multiple of 8 bytes.
Result<std::string> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata = {});

// By content: the npy magic, or a safetensors header; the extension only breaks ties.
Result<FileFormat> detect_format(std::string_view path, std::string_view bytes);

Result<std::string> read_file_bytes(const std::filesystem::path& path, size_t max_file_bytes);

Result<Tensor> read_tensor_file(const std::filesystem::path& path, const ReadOptions& options);

Status write_npy_file(const std::filesystem::path& path, const Tensor& tensor);

Status write_safetensors_file(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln::numerics
