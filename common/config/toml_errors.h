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

}  // namespace kiln::config
