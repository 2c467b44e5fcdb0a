#include "coordinator/cli/cli_options.h"

#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>

namespace kiln::cli {

void add_deprecated_option(CLI::App& command, const std::string& old_name, const std::string& new_usage,
                           std::function<void(const std::string&)> apply) {
  command
      .add_option_function<std::string>(
          old_name,
          [old_name, new_usage, apply](const std::string& value) {
            std::cerr << "kiln: " << old_name << " is deprecated and goes away in the next release; use " << new_usage
                      << "\n";
            apply(value);
          },
          "deprecated: " + new_usage)
      ->group("");
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& names) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const auto& name : names) {
    const std::size_t distance = edit_distance(word, name);
    const bool prefix = word.size() >= 3 && name.rfind(word, 0) == 0;
    if (distance <= limit || prefix) near.emplace_back(prefix ? 0 : distance, name);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [distance, name] : near) out.push_back(std::move(name));
  return out;
}

}  // namespace kiln::cli
