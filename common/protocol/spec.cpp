#include "common/protocol/spec.h"

#include <fmt/format.h>

#include "common/text/utf8.h"

namespace kiln::protocol {

std::optional<std::string> check_str(const std::string& value, Str spec) {
  if (value.size() < spec.min_len || value.size() > spec.max_len) {
    return fmt::format("must be {} to {} bytes long (got {})", spec.min_len, spec.max_len, value.size());
  }
  if (auto bad = text::first_invalid_utf8(value)) {
    return fmt::format("must be valid UTF-8 (byte 0x{:02x} at offset {} is not): \"{}\"",
                       static_cast<unsigned char>(value[*bad]), *bad, text::printable(value));
  }
  return std::nullopt;
}

std::optional<std::string> check_bytes(const std::string& value, Bytes spec) {
  if (value.size() > spec.max_len) return fmt::format("must be at most {} bytes long (got {})", spec.max_len, value.size());
  return std::nullopt;
}

std::optional<std::string> check_int(std::int64_t value, Range spec) {
  if (value < spec.min || value > spec.max) {
    return fmt::format("must be between {} and {} (got {})", spec.min, spec.max, value);
  }
  return std::nullopt;
}

std::optional<std::string> check_count(std::size_t count, Count spec) {
  if (count < spec.min || count > spec.max) {
    return fmt::format("must have {} to {} elements (got {})", spec.min, spec.max, count);
  }
  return std::nullopt;
}

}  // namespace kiln::protocol
