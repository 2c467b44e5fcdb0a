// Option helpers shared by the commands, kept apart from CLI11's header.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace kiln::cli {

// An old spelling kept for one release: hidden from --help, it still works, and using it prints
// one line on stderr naming the new spelling. `apply` gets the value given.
void add_deprecated_option(CLI::App& command, const std::string& old_name, const std::string& new_usage,
                           std::function<void(const std::string&)> apply);

// The names near `word` among `names` (edit distance at most a third of the word, at least 2).
std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& names);

}  // namespace kiln::cli
