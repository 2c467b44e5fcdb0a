// Levenshtein distance, for "did you mean ...?" on a mistyped key or command.
#pragma once

#include <cstddef>
#include <string_view>

namespace kiln::text {

std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kiln::text
