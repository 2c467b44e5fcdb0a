// Where a TOML node stands, for error messages ("set.toml:12:3"). For the .cpp files that parse
// TOML: toml++ is a heavy header, keep it out of headers others include.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace kiln::qualification::detail {

inline std::string where(std::string_view source, const toml::source_region& region) {
  return fmt::format("{}:{}:{}", source, region.begin.line, region.begin.column);
}

}  // namespace kiln::qualification::detail
