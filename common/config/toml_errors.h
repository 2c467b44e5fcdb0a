// The one way kiln's TOML loaders report problems: where a node stands ("file:12:3"), parsing
// with errors as values, and unknown keys with the nearest known one ("did you mean ...?").
// Includes toml++, a heavy header: include it from the .cpp files that parse TOML only.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <toml++/toml.h>

#include "common/error.h"

namespace kiln::config {

// "source:line:column" ("source" for a node that was not read from it).
std::string where(std::string_view source, const toml::source_region& region);

// Parses TOML text. A syntax error is "source:line:column: not valid TOML: what; remedy".
Result<toml::table> parse_toml(std::string_view text, std::string_view source, std::string_view remedy);

// The whole file. One that cannot be read is an Errc::io "cannot read WHAT PATH: reason;
// unreadable_remedy".
Result<std::string> read_text_file(const std::string& path, std::string_view what, std::string_view unreadable_remedy);

// Reads and parses a file: read_text_file, then parse_toml with the path as the source.
Result<toml::table> parse_toml_file(const std::string& path, std::string_view what, std::string_view unreadable_remedy,
                                    std::string_view syntax_remedy);

// The known name nearest to `name`, when it is a near miss (a typo rather than another word).
std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string_view>& known);

// What to say after "unknown key 'x' in ...": "; did you mean 'y'?", or the known keys.
std::string suggestion(std::string_view name, const std::vector<std::string_view>& known);

// "source:line:column: unknown key 'x' in PLACE; did you mean 'y'?" for the first key of
// `table` that is not in `known`.
Status check_known_keys(std::string_view source, const toml::table& table, std::string_view place,
                        const std::vector<std::string_view>& known);

// A coordinator's address, or the list of the coordinators sharing one store (the active one
// and its standbys, in the order to try them): each a "tcp://host:port" to connect to. The
// error says "AT: KEY ..." (AT: where the key stands, "file:line:column") and what to write.
Result<std::vector<std::string>> coordinator_endpoints(std::string_view at, const toml::node& node,
                                                       std::string_view key);

// Every problem of one file, so that one run reports all that needs fixing: each
// "source:line:column: what", in the order of the file; those with no position (a missing key)
// come last.
class Problems {
 public:
  explicit Problems(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }
  bool empty() const { return problems_.empty(); }
  std::size_t size() const { return problems_.size(); }

  // "source:line:column: what".
  void at(const toml::source_region& region, std::string_view what);
  // "source: what", for a problem of no one place.
  void add(std::string_view what);
  // A message that names its place already (another loader's error), kept in the file's order
  // as if it stood at `position`; a message of several lines is several problems.
  void add_located(const toml::source_position& position, std::string_view message);
  // The unknown keys of `table` (not in `known`), each with the nearest known one.
  void unknown_keys(const toml::table& table, std::string_view place, const std::vector<std::string_view>& known);

  // The problems in the order of the file.
  std::vector<std::string> sorted() const;
  // Errc::config with one problem a line, or success.
  Status status() const;

 private:
  std::string source_;
  std::vector<std::pair<toml::source_position, std::string>> problems_;
};

}  // namespace kiln::config
