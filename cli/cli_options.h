// Option helpers shared by the commands, kept apart from CLI11's header.
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
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

// --last N and --all of a command that lists the latest records of a kind (kiln runs, kiln
// bundles): the latest 50 by default, every one with --all. `what` names them ("runs").
struct LatestOptions {
  std::size_t last = 50;
  bool all = false;

  void add_to(CLI::App& command, const std::string& what);
  std::size_t count() const { return all ? std::numeric_limits<std::size_t>::max() : last; }
  // What a listing that left older ones out says after them.
  std::string more_note(const std::string& what) const;
};

// The names near `word` among `names` (edit distance at most a third of the word, at least 2).
std::vector<std::string> near_names(const std::string& word, const std::vector<std::string>& names);

}  // namespace kiln::cli
