// Writing TOML text by hand (the generated files are small and their layout is part of their
// readability): strings and floats in TOML syntax.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

namespace kiln::qualification::detail {

inline std::string toml_quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out.push_back(c);
    }
  }
  return out + "\"";
}

// A TOML float: the shortest text that reads back as the same double, always with a '.' or an
// exponent so that it stays a float (1.0, not the integer 1).
inline std::string toml_float(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

}  // namespace kiln::qualification::detail
