#include "common/stats/samples_file.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln::stats {
namespace {

bool is_separator(char c) {
  return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

Result<std::vector<double>> parse_samples(std::string_view text, std::string_view source) {
  std::vector<double> samples;
  std::size_t line_number = 0;
  std::size_t line_start = 0;
  while (line_start <= text.size()) {
    std::size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    ++line_number;
    std::string_view line = text.substr(line_start, line_end - line_start);
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    std::size_t i = 0;
    while (i < line.size()) {
      if (is_separator(line[i])) {
        ++i;
        continue;
      }
      std::size_t j = i;
      while (j < line.size() && !is_separator(line[j])) ++j;
      const std::string_view token = line.substr(i, j - i);
      const std::string where = std::string(source) + ":" + std::to_string(line_number) + ": ";
      double value = 0;
      // from_chars does not take a leading '+'; accept it as people write it.
      std::string_view digits = token.front() == '+' ? token.substr(1) : token;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (ec == std::errc::result_out_of_range) {
        return fail(Errc::invalid_argument,
                    where + "'" + std::string(token) + "' is out of the range of a double; " +
                        "write samples in a unit that keeps them moderate");
      }
      if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
        return fail(Errc::invalid_argument,
                    where + "'" + std::string(token) +
                        "' is not a number; write one number per sample, separated by spaces, "
                        "commas or newlines, and start comments with #");
      }
      if (!std::isfinite(value)) {
        return fail(Errc::invalid_argument,
                    where + "'" + std::string(token) +
                        "' is not a finite number; drop failed measurements instead of writing "
                        "nan or inf");
      }
      if (samples.size() >= kMaxSamplesPerFile) {
        return fail(Errc::too_large, where + "more than " + std::to_string(kMaxSamplesPerFile) +
                                         " samples; summarise or split the measurements");
      }
      samples.push_back(value);
      i = j;
    }
    line_start = line_end + 1;
  }
  if (samples.empty()) {
    return fail(Errc::invalid_argument,
                std::string(source) +
                    " holds no samples; put one measurement per line (or separated by spaces or "
                    "commas), at least 5 for a usable comparison");
  }
  return samples;
}

Result<std::vector<double>> read_samples_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, "cannot open samples file '" + path + "': " + std::strerror(errno) +
                              "; check the path and its permissions");
  }
  std::ostringstream content;
  char buffer[1 << 16];
  std::size_t total = 0;
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    total += static_cast<std::size_t>(in.gcount());
    if (total > kMaxSamplesFileBytes) {
      return fail(Errc::too_large, "samples file '" + path + "' is larger than " +
                                       std::to_string(kMaxSamplesFileBytes >> 20) +
                                       " MiB; summarise or split the measurements");
    }
    content.write(buffer, in.gcount());
  }
  if (in.bad()) {
    return fail(Errc::io, "reading samples file '" + path + "' failed; check the file system");
  }
  return parse_samples(content.str(), path);
}

}  // namespace kiln::stats
