#include "common/numerics/tensor_io.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <set>
#include <system_error>

#include <nlohmann/json.hpp>

namespace kiln::numerics {
namespace {

constexpr std::string_view npy_magic = "\x93NUMPY";
// Dimensions beyond this are certainly not a real file's; keeps the size arithmetic exact.
constexpr int64_t max_dimension = int64_t{1} << 40;

uint64_t read_le(std::string_view bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + static_cast<size_t>(i)]);
  }
  return value;
}

void append_le(std::string& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) {
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xFFu));
  }
}

// Element count of a shape whose dimensions were already checked to be in [0, max_dimension].
Result<int64_t> checked_count(const std::vector<int64_t>& shape, std::string_view what) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / 8 / dim) {
      return fail(Errc::bad_message, std::string(what) + ": shape " + shape_text(shape) +
                                         " is too large to be real; the header is corrupt");
    }
    count *= dim;
  }
  return count;
}

Status check_tensor(const Tensor& tensor) {
  for (int64_t dim : tensor.shape) {
    if (dim < 0 || dim > max_dimension) {
      return fail(Errc::invalid_argument, "tensor shape " + shape_text(tensor.shape) +
                                              " has a dimension out of range; fix the shape");
    }
  }
  auto count = checked_count(tensor.shape, "tensor");
  if (!count) {
    return tl::unexpected(count.error());
  }
  if (static_cast<uint64_t>(*count) != tensor.values.size()) {
    return fail(Errc::invalid_argument, "tensor shape " + shape_text(tensor.shape) + " has " +
                                            std::to_string(*count) + " elements but " +
                                            std::to_string(tensor.values.size()) +
                                            " values were given; make them agree");
  }
  return {};
}

std::vector<double> decode_elements(DType dtype, std::string_view data, int64_t count) {
  const int width = size_in_bytes(dtype);
  std::vector<double> values;
  values.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    values.push_back(decode(dtype, read_le(data, static_cast<size_t>(i) * static_cast<size_t>(width), width)));
  }
  return values;
}

void encode_elements(const Tensor& tensor, std::string& out) {
  const int width = size_in_bytes(tensor.dtype);
  for (double value : tensor.values) {
    append_le(out, encode(tensor.dtype, value, Saturation::non_saturating), width);
  }
}

// ---- .npy header: a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class NpyHeaderParser {
 public:
  explicit NpyHeaderParser(std::string_view text) : text_(text) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Result<Header> parse() {
    Header header;
    std::set<std::string> seen;
    skip_space();
    if (!consume('{')) {
      return error("expected '{' at the start of the header dict");
    }
    while (true) {
      skip_space();
      if (consume('}')) {
        break;
      }
      auto key = parse_string();
      if (!key) {
        return tl::unexpected(key.error());
      }
      skip_space();
      if (!consume(':')) {
        return error("expected ':' after key '" + *key + "'");
      }
      skip_space();
      if (!seen.insert(*key).second) {
        return error("key '" + *key + "' appears twice");
      }
      if (*key == "descr") {
        if (peek() == '[') {
          return fail(Errc::bad_message,
                      "npy header: structured (record) arrays are not supported; save a plain "
                      "floating point array");
        }
        auto descr = parse_string();
        if (!descr) {
          return tl::unexpected(descr.error());
        }
        header.descr = *descr;
      } else if (*key == "fortran_order") {
        auto flag = parse_bool();
        if (!flag) {
          return tl::unexpected(flag.error());
        }
        header.fortran_order = *flag;
      } else if (*key == "shape") {
        auto shape = parse_shape();
        if (!shape) {
          return tl::unexpected(shape.error());
        }
        header.shape = *shape;
      } else {
        return error("unexpected key '" + *key + "' (numpy writes only descr, fortran_order, shape)");
      }
      skip_space();
      if (consume(',')) {
        continue;
      }
      skip_space();
      if (consume('}')) {
        break;
      }
      return error("expected ',' or '}' after the value of '" + *key + "'");
    }
    skip_space();
    if (pos_ != text_.size()) {
      return error("unexpected text after the header dict");
    }
    for (const char* required : {"descr", "fortran_order", "shape"}) {
      if (!seen.count(required)) {
        return error(std::string("missing key '") + required + "'");
      }
    }
    return header;
  }

 private:
  tl::unexpected<Error> error(const std::string& what) const {
    return fail(Errc::bad_message, "npy header is malformed: " + what + " (at byte " +
                                       std::to_string(pos_) +
                                       "); the file is damaged or not written by numpy.save");
  }

  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool consume(char c) {
    if (peek() == c && pos_ < text_.size()) {
      ++pos_;
      return true;
    }
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  Result<std::string> parse_string() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') {
      return error("expected a quoted string");
    }
    ++pos_;
    const size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) {
      return error("unterminated string");
    }
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) {
      return error("escape sequences are not expected in a header string");
    }
    pos_ = end + 1;
    return value;
  }

  Result<bool> parse_bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return error("expected True or False");
  }

  Result<std::vector<int64_t>> parse_shape() {
    std::vector<int64_t> shape;
    if (!consume('(')) {
      return error("expected '(' to start the shape tuple");
    }
    while (true) {
      skip_space();
      if (consume(')')) {
        return shape;
      }
      if (!std::isdigit(static_cast<unsigned char>(peek()))) {
        return error("expected a non-negative integer dimension");
      }
      int64_t dim = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        dim = dim * 10 + (peek() - '0');
        ++pos_;
        if (dim > max_dimension) {
          return error("dimension larger than 2^40");
        }
      }
      consume('L');  // Python 2 long literal
      shape.push_back(dim);
      skip_space();
      if (consume(',')) {
        continue;
      }
      skip_space();
      if (consume(')')) {
        if (shape.size() == 1) {
          // "(3)" is an int in Python, not a tuple: numpy always writes "(3,)".
          return error("a one-dimensional shape must be written '(n,)'");
        }
        return shape;
      }
      return error("expected ',' or ')' in the shape tuple");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// The element format of an npy descr, or an error saying why it cannot be read.
Result<DType> npy_dtype(const std::string& descr, const ReadOptions& options) {
  if (descr.size() < 3) {
    return fail(Errc::bad_message, "npy descr '" + descr + "' is not a numpy type string");
  }
  const char order = descr[0];
  const char kind = descr[1];
  const std::string size_text = descr.substr(2);
  if (!std::all_of(size_text.begin(), size_text.end(), [](unsigned char c) { return std::isdigit(c); }) ||
      size_text.size() > 3) {
    return fail(Errc::bad_message, "npy descr '" + descr + "' is not a numpy type string");
  }
  const int size = std::stoi(size_text);
  if (order == '>' && size > 1) {
    return fail(Errc::bad_message, "npy file holds big-endian data ('" + descr +
                                       "'); convert it with arr.astype(arr.dtype.newbyteorder('<'))");
  }
  if (order != '<' && order != '|') {
    return fail(Errc::bad_message, "npy descr '" + descr + "' has byte order '" + std::string(1, order) +
                                       "'; only little-endian files are read");
  }
  if (kind == 'f') {
    switch (size) {
      case 8: return DType::f64;
      case 4: return DType::f32;
      case 2: return DType::f16;
      default: break;
    }
    return fail(Errc::bad_message, "npy float type '" + descr + "' is not supported; use float64, float32 or float16");
  }
  if (kind == 'V') {
    if (!options.raw_dtype) {
      return fail(Errc::invalid_argument,
                  "npy file holds raw " + std::to_string(size) + "-byte values ('" + descr +
                      "'), as ml_dtypes saves bfloat16 and float8; state their format (for example "
                      "--dtype bf16 or --dtype fp8_e4m3)");
    }
    if (size_in_bytes(*options.raw_dtype) != size) {
      return fail(Errc::invalid_argument,
                  "npy file holds raw " + std::to_string(size) + "-byte values ('" + descr + "') but " +
                      std::string(to_string(*options.raw_dtype)) + " takes " +
                      std::to_string(size_in_bytes(*options.raw_dtype)) + " bytes; state the format the file holds");
    }
    return *options.raw_dtype;
  }
  if (kind == 'O') {
    return fail(Errc::bad_message, "npy file holds pickled Python objects ('" + descr +
                                       "'); save a numeric array (bfloat16 as arr.view(np.uint16) is not "
                                       "accepted either: use ml_dtypes' own save)");
  }
  return fail(Errc::bad_message, "npy element type '" + descr +
                                     "' is not a floating point type; golden comparison reads float64, "
                                     "float32, float16, and raw bf16/fp8");
}

// ---- safetensors

struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> entries;
  std::string_view data;
};

std::optional<DType> safetensors_float_dtype(const std::string& name) {
  if (name == "F64") return DType::f64;
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "F8_E4M3") return DType::f8_e4m3;
  if (name == "F8_E5M2") return DType::f8_e5m2;
  return std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::f8_e5m2: return "F8_E5M2";
  }
  return "F32";
}

// Bytes per element of the safetensors types, so the layout of tensors we do not read can
// still be checked. 0: unknown (or packed below a byte).
int safetensors_element_bytes(const std::string& name) {
  static const std::map<std::string, int> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},
  };
  auto it = sizes.find(name);
  return it == sizes.end() ? 0 : it->second;
}

tl::unexpected<Error> bad_safetensors(const std::string& what) {
  return fail(Errc::bad_message, "safetensors file is malformed: " + what +
                                     "; the file is damaged or was not written by a safetensors library");
}

Result<SafetensorsLayout> parse_safetensors_layout(std::string_view bytes, const ReadOptions& options) {
  if (bytes.size() < 8) {
    return bad_safetensors("it is " + std::to_string(bytes.size()) +
                           " bytes long, shorter than the 8-byte header length (truncated?)");
  }
  const uint64_t header_bytes = read_le(bytes, 0, 8);
  if (header_bytes > options.max_header_bytes) {
    return fail(Errc::too_large, "safetensors header claims " + std::to_string(header_bytes) +
                                     " bytes, over the limit of " + std::to_string(options.max_header_bytes) +
                                     "; the file is corrupt or not a safetensors file");
  }
  if (header_bytes > bytes.size() - 8) {
    return bad_safetensors("the header claims " + std::to_string(header_bytes) + " bytes but only " +
                           std::to_string(bytes.size() - 8) + " follow (truncated?)");
  }
  const std::string_view header_text = bytes.substr(8, header_bytes);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text.begin(), header_text.end(), nullptr, false);
  } catch (const std::exception& e) {
    return bad_safetensors(std::string("its header is not valid JSON (") + e.what() + ")");
  }
  if (header.is_discarded()) {
    return bad_safetensors("its header is not valid JSON");
  }
  if (!header.is_object()) {
    return bad_safetensors("its header is not a JSON object");
  }
  SafetensorsLayout layout;
  layout.data = bytes.substr(8 + header_bytes);
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) {
        return bad_safetensors("__metadata__ is not an object");
      }
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return bad_safetensors("__metadata__ value for '" + key + "' is not a string");
        }
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!info.is_object()) {
      return bad_safetensors(where + " is not described by an object");
    }
    SafetensorsEntry entry;
    entry.name = name;
    const auto dtype = info.find("dtype");
    if (dtype == info.end() || !dtype->is_string()) {
      return bad_safetensors(where + " has no string 'dtype'");
    }
    entry.dtype = dtype->get<std::string>();
    const auto shape = info.find("shape");
    if (shape == info.end() || !shape->is_array()) {
      return bad_safetensors(where + " has no 'shape' array");
    }
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > static_cast<uint64_t>(max_dimension)) {
        return bad_safetensors(where + " has a shape entry that is not a non-negative integer below 2^40");
      }
      entry.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    const auto offsets = info.find("data_offsets");
    if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad_safetensors(where + " has no 'data_offsets' pair of non-negative integers");
    }
    entry.begin = (*offsets)[0].get<uint64_t>();
    entry.end = (*offsets)[1].get<uint64_t>();
    if (entry.begin > entry.end || entry.end > layout.data.size()) {
      return bad_safetensors(where + " has data_offsets [" + std::to_string(entry.begin) + ", " +
                             std::to_string(entry.end) + "] outside the " + std::to_string(layout.data.size()) +
                             "-byte data section (truncated?)");
    }
    auto count = checked_count(entry.shape, "safetensors " + where);
    if (!count) {
      return tl::unexpected(count.error());
    }
    const int element_bytes = safetensors_element_bytes(entry.dtype);
    if (element_bytes > 0 && static_cast<uint64_t>(*count) * static_cast<uint64_t>(element_bytes) !=
                                 entry.end - entry.begin) {
      return bad_safetensors(where + " has shape " + shape_text(entry.shape) + " of " + entry.dtype + " (" +
                             std::to_string(*count * element_bytes) + " bytes) but its data_offsets span " +
                             std::to_string(entry.end - entry.begin) + " bytes");
    }
    layout.entries.push_back(std::move(entry));
  }
  // As the reference implementation requires: the byte ranges tile the data section with no
  // gap, overlap or trailing bytes.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& entry : layout.entries) {
    by_offset.push_back(&entry);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t expected_begin = 0;
  for (const SafetensorsEntry* entry : by_offset) {
    if (entry->begin != expected_begin) {
      return bad_safetensors("tensor '" + entry->name + "' starts at byte " + std::to_string(entry->begin) +
                             " of the data section where byte " + std::to_string(expected_begin) +
                             " was expected (tensors overlap or leave a gap)");
    }
    expected_begin = entry->end;
  }
  if (expected_begin != layout.data.size()) {
    return bad_safetensors("the tensors cover " + std::to_string(expected_begin) + " of the " +
                           std::to_string(layout.data.size()) + " data bytes");
  }
  return layout;
}

std::string joined_names(const std::vector<SafetensorsEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) {
    names.push_back(entry.name);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 20);
  for (size_t i = 0; i < shown; ++i) {
    out += (i ? ", " : "") + names[i];
  }
  if (names.size() > shown) {
    out += ", ... (" + std::to_string(names.size()) + " in all)";
  }
  return out;
}

Status write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return fail(Errc::io, "cannot open '" + path.string() + "' for writing; check the directory exists and is writable");
  }
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    return fail(Errc::io, "writing '" + path.string() + "' failed; check free disk space");
  }
  return {};
}

}  // namespace

Result<Tensor> parse_npy(std::string_view bytes, const ReadOptions& options) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != npy_magic) {
    return fail(Errc::bad_message, "not an npy file: it does not start with the \\x93NUMPY magic (or is truncated)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return fail(Errc::unsupported_version, "npy format version " + std::to_string(major) + "." +
                                               std::to_string(minor) +
                                               " is not supported; versions 1.0, 2.0 and 3.0 are read");
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) {
    return fail(Errc::bad_message, "npy file is truncated inside its header length");
  }
  const uint64_t header_bytes = read_le(bytes, 8, static_cast<int>(length_bytes));
  if (header_bytes > options.max_header_bytes) {
    return fail(Errc::too_large, "npy header claims " + std::to_string(header_bytes) + " bytes, over the limit of " +
                                     std::to_string(options.max_header_bytes) + "; the file is corrupt");
  }
  const size_t data_start = 8 + length_bytes + header_bytes;
  if (bytes.size() < data_start) {
    return fail(Errc::bad_message, "npy file is truncated inside its header (" + std::to_string(bytes.size()) +
                                       " bytes, header ends at " + std::to_string(data_start) + ")");
  }
  auto header = NpyHeaderParser(bytes.substr(8 + length_bytes, header_bytes)).parse();
  if (!header) {
    return tl::unexpected(header.error());
  }
  if (header->fortran_order) {
    return fail(Errc::bad_message,
                "npy file is in Fortran (column-major) order; save it with np.ascontiguousarray(arr)");
  }
  auto dtype = npy_dtype(header->descr, options);
  if (!dtype) {
    return tl::unexpected(dtype.error());
  }
  auto count = checked_count(header->shape, "npy file");
  if (!count) {
    return tl::unexpected(count.error());
  }
  const uint64_t expected_data = static_cast<uint64_t>(*count) * static_cast<uint64_t>(size_in_bytes(*dtype));
  const uint64_t actual_data = bytes.size() - data_start;
  if (actual_data != expected_data) {
    return fail(Errc::bad_message,
                "npy file has " + std::to_string(actual_data) + " data bytes but shape " + shape_text(header->shape) +
                    " of " + header->descr + " needs " + std::to_string(expected_data) +
                    (actual_data < expected_data ? " (truncated?)" : " (trailing bytes)"));
  }
  Tensor tensor;
  tensor.dtype = *dtype;
  tensor.shape = header->shape;
  tensor.values = decode_elements(*dtype, bytes.substr(data_start), *count);
  return tensor;
}

Result<std::string> serialize_npy(const Tensor& tensor) {
  if (auto ok = check_tensor(tensor); !ok) {
    return tl::unexpected(ok.error());
  }
  std::string descr;
  switch (tensor.dtype) {
    case DType::f64: descr = "<f8"; break;
    case DType::f32: descr = "<f4"; break;
    case DType::f16: descr = "<f2"; break;
    case DType::bf16: descr = "<V2"; break;
    case DType::f8_e4m3:
    case DType::f8_e5m2: descr = "|V1"; break;
  }
  std::string shape = "(";
  for (int64_t dim : tensor.shape) {
    shape += std::to_string(dim) + ", ";
  }
  if (tensor.shape.size() > 1) {
    shape.resize(shape.size() - 2);
  } else if (tensor.shape.size() == 1) {
    shape.resize(shape.size() - 1);  // keep the comma: "(3,)"
  }
  shape += ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // numpy pads the header with spaces and a newline so the data starts 64-byte aligned.
  const bool version2 = 10 + dict.size() + 1 > 65535;
  const size_t prefix = version2 ? 12 : 10;
  const size_t unpadded = prefix + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string out(npy_magic);
  out.push_back(static_cast<char>(version2 ? 2 : 1));
  out.push_back('\0');
  append_le(out, dict.size(), version2 ? 4 : 2);
  out += dict;
  encode_elements(tensor, out);
  return out;
}

Result<std::vector<std::string>> safetensors_names(std::string_view bytes, const ReadOptions& options) {
  auto layout = parse_safetensors_layout(bytes, options);
  if (!layout) {
    return tl::unexpected(layout.error());
  }
  std::vector<std::string> names;
  for (const auto& entry : layout->entries) {
    names.push_back(entry.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<Tensor> parse_safetensors(std::string_view bytes, const ReadOptions& options) {
  auto layout = parse_safetensors_layout(bytes, options);
  if (!layout) {
    return tl::unexpected(layout.error());
  }
  const SafetensorsEntry* chosen = nullptr;
  if (options.tensor_name) {
    for (const auto& entry : layout->entries) {
      if (entry.name == *options.tensor_name) {
        chosen = &entry;
      }
    }
    if (!chosen) {
      return fail(Errc::not_found, "safetensors file has no tensor '" + *options.tensor_name +
                                       "'; it holds: " + joined_names(layout->entries));
    }
  } else if (layout->entries.size() == 1) {
    chosen = &layout->entries.front();
  } else if (layout->entries.empty()) {
    return fail(Errc::not_found, "safetensors file holds no tensors");
  } else {
    return fail(Errc::invalid_argument, "safetensors file holds " + std::to_string(layout->entries.size()) +
                                            " tensors; name one (--tensor NAME): " + joined_names(layout->entries));
  }
  const auto dtype = safetensors_float_dtype(chosen->dtype);
  if (!dtype) {
    return fail(Errc::bad_message, "tensor '" + chosen->name + "' has dtype " + chosen->dtype +
                                       "; golden comparison reads F64, F32, F16, BF16, F8_E4M3 and F8_E5M2");
  }
  Tensor tensor;
  tensor.dtype = *dtype;
  tensor.shape = chosen->shape;
  tensor.values = decode_elements(*dtype, layout->data.substr(chosen->begin, chosen->end - chosen->begin),
                                  element_count(chosen->shape));
  return tensor;
}

Result<std::string> serialize_safetensors(const std::vector<NamedTensor>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& named : tensors) {
    if (named.name.empty() || named.name == "__metadata__" || header.contains(named.name)) {
      return fail(Errc::invalid_argument, "tensor name '" + named.name +
                                              "' is empty, reserved or repeated; give each tensor a unique name");
    }
    if (auto ok = check_tensor(named.tensor); !ok) {
      return fail(ok.error().code, "tensor '" + named.name + "': " + ok.error().message);
    }
    const size_t begin = data.size();
    encode_elements(named.tensor, data);
    header[named.name] = {{"dtype", safetensors_dtype_name(named.tensor.dtype)},
                          {"shape", named.tensor.shape},
                          {"data_offsets", {begin, data.size()}}};
  }
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
  }
  // Names and metadata come from callers: replace invalid UTF-8 rather than throw.
  std::string header_text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string out;
  append_le(out, header_text.size(), 8);
  out += header_text;
  out += data;
  return out;
}

Result<FileFormat> detect_format(std::string_view path, std::string_view bytes) {
  if (bytes.substr(0, npy_magic.size()) == npy_magic) {
    return FileFormat::npy;
  }
  const bool safetensors_extension =
      path.size() >= 12 && path.substr(path.size() - 12) == ".safetensors";
  if (safetensors_extension || (bytes.size() > 8 && bytes[8] == '{')) {
    return FileFormat::safetensors;
  }
  return fail(Errc::bad_message, "'" + std::string(path) +
                                     "' is neither an .npy file (no \\x93NUMPY magic) nor a .safetensors file; "
                                     "give a tensor saved with numpy.save or safetensors");
}

Result<std::string> read_file_bytes(const std::filesystem::path& path, size_t max_file_bytes) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return fail(Errc::io, "cannot read '" + path.string() + "': " + ec.message() + "; check the path");
  }
  if (size > max_file_bytes) {
    return fail(Errc::too_large, "'" + path.string() + "' is " + std::to_string(size) + " bytes, over the limit of " +
                                     std::to_string(max_file_bytes) + "; compare a smaller tensor or slice");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, "cannot open '" + path.string() + "'; check it exists and is readable");
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(in.gcount()) != size) {
    return fail(Errc::io, "reading '" + path.string() + "' stopped early; was it changed while being read?");
  }
  return bytes;
}

Result<Tensor> read_tensor_file(const std::filesystem::path& path, const ReadOptions& options) {
  auto bytes = read_file_bytes(path, options.max_file_bytes);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  auto format = detect_format(path.string(), *bytes);
  if (!format) {
    return tl::unexpected(format.error());
  }
  auto tensor = *format == FileFormat::npy ? parse_npy(*bytes, options) : parse_safetensors(*bytes, options);
  if (!tensor) {
    return fail(tensor.error().code, path.string() + ": " + tensor.error().message);
  }
  return tensor;
}

Status write_npy_file(const std::filesystem::path& path, const Tensor& tensor) {
  auto bytes = serialize_npy(tensor);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  return write_bytes(path, *bytes);
}

Status write_safetensors_file(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  auto bytes = serialize_safetensors(tensors, metadata);
  if (!bytes) {
    return tl::unexpected(bytes.error());
  }
  return write_bytes(path, *bytes);
}

}  // namespace kiln::numerics
