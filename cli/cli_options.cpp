#include "cli/cli_options.h"

#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/text/edit_distance.h"

namespace kiln::cli {

void LatestOptions::add_to(CLI::App& command, const std::string& what) {
  command.add_option("--last", last, fmt::format("how many of the latest {} to list ({})", what, last))
      ->check(CLI::Range(1, 1000000));
  command.add_flag("--all", all, fmt::format("list all the {} recorded, oldest first (reads them all)", what));
}

std::string LatestOptions::more_note(const std::string& what) const {
  return fmt::format("(the latest {} {}; --last N lists more, --all every one)\n", last, what);
}

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

std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& names) {
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const auto& name : names) {
    const std::size_t distance = text::edit_distance(word, name);
    const bool prefix = word.size() >= 3 && name.rfind(word, 0) == 0;
    if (distance <= limit || prefix) near.emplace_back(prefix ? 0 : distance, name);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [distance, name] : near) out.push_back(std::move(name));
  return out;
}

}  // namespace kiln::cli
