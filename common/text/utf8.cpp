#include "common/text/utf8.h"

#include <fmt/format.h>

namespace kiln::text {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the valid sequence starting at `i`, or 0 when none starts there. `*subpart`
// gets how many bytes form the maximal invalid subpart when it is 0 (always at least 1).
std::size_t sequence_length(std::string_view s, std::size_t i, std::size_t* subpart) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  *subpart = 1;
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  for (std::size_t k = 1; k < length; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char c = byte(i + k);
    const unsigned char lo = k == 1 ? low : 0x80;
    const unsigned char hi = k == 1 ? high : 0xBF;
    if (c < lo || c > hi) return 0;
    *subpart = k + 1;
  }
  return length;
}

}  // namespace

std::optional<std::size_t> first_invalid_utf8(std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t subpart = 0;
    const std::size_t length = sequence_length(bytes, i, &subpart);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

std::string to_valid_utf8(std::string_view bytes) {
  if (is_valid_utf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  std::size_t i = 0;
  while (i < bytes.size()) {
    std::size_t subpart = 0;
    const std::size_t length = sequence_length(bytes, i, &subpart);
    if (length == 0) {
      out += kReplacement;
      i += subpart;
    } else {
      out.append(bytes.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string utf8_tail(std::string_view bytes, std::size_t max_bytes) {
  // Repair a little more than is kept, so a sequence cut by the window is judged whole.
  const std::size_t window = max_bytes + 3;
  std::string text = to_valid_utf8(bytes.size() <= window ? bytes : bytes.substr(bytes.size() - window));
  if (text.size() <= max_bytes) return text;
  std::size_t start = text.size() - max_bytes;
  while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
  return text.substr(start);
}

std::string utf8_head(std::string_view bytes, std::size_t max_bytes) {
  std::string text = to_valid_utf8(bytes.substr(0, std::min(bytes.size(), max_bytes + 3)));
  if (text.size() <= max_bytes) return text;
  std::size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string printable(std::string_view bytes, std::size_t max_bytes) {
  const std::string_view shown = bytes.substr(0, std::min(bytes.size(), max_bytes));
  std::string out;
  std::size_t i = 0;
  while (i < shown.size()) {
    const auto c = static_cast<unsigned char>(shown[i]);
    std::size_t subpart = 0;
    const std::size_t length = c >= 0x80 ? sequence_length(shown, i, &subpart) : 0;
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
      ++i;
    } else if (length > 0) {
      out.append(shown.substr(i, length));
      i += length;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  if (shown.size() < bytes.size()) out += "...";
  return out;
}

}  // namespace kiln::text
