// Sample files for `kiln compare`: numbers separated by whitespace, commas or newlines;
// `#` starts a comment that runs to the end of the line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kiln::stats {

inline constexpr std::size_t kMaxSamplesPerFile = 1'000'000;
inline constexpr std::size_t kMaxSamplesFileBytes = 64u << 20;

// `source` names the text in error messages ("base.txt:3: ..."). Rejects anything that is not
// a finite number, and a text without any sample.
Result<std::vector<double>> parse_samples(std::string_view text, std::string_view source);

// Reads and parses a file; io errors say which file and why.
Result<std::vector<double>> read_samples_file(const std::string& path);

}  // namespace kiln::stats
