// What docs/cli.md's "JSON output" table lists for a command, and how a printed document differs
// from it: shared by the tests that hold the commands' JSON to the docs.
#pragma once

#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace kiln::testing {

// The backquoted names of the last column of `command`'s row: `required` are those outside
// parentheses; `allowed` adds those inside (an entry's own fields, remarks such as "and the sim's
// `sim_effect`"), which a document may print or not. Fails the test when there is no such row.
struct DocumentedFields {
  std::set<std::string> required;
  std::set<std::string> allowed;
};
DocumentedFields documented_fields(const std::string& command);

// "" when the keys of `document` are the documented fields, else what differs.
std::string difference(const nlohmann::json& document, const DocumentedFields& documented);

}  // namespace kiln::testing
