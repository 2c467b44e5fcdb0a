#include "tests/integration/documented_fields.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

namespace kiln::testing {

DocumentedFields documented_fields(const std::string& command) {
  std::ifstream in(std::filesystem::path(KILN_SOURCE_DIR) / "docs" / "cli.md");
  const std::string row_start = "| `" + command + "` |";
  bool in_json_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_json_section = line == "## JSON output";
    if (!in_json_section || line.rfind(row_start, 0) != 0) continue;
    const std::string fields = line.substr(line.rfind('|', line.size() - 2) + 1);
    DocumentedFields names;
    int depth = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == '(') ++depth;
      if (fields[i] == ')') --depth;
      if (fields[i] == '`') {
        const std::size_t end = fields.find('`', i + 1);
        const std::string name = fields.substr(i + 1, end - i - 1);
        names.allowed.insert(name);
        if (depth == 0) names.required.insert(name);
        i = end;
      }
    }
    return names;
  }
  FAIL("docs/cli.md has no JSON row for " << command);
  return {};
}

std::string difference(const nlohmann::json& document, const DocumentedFields& documented) {
  std::string out;
  for (const auto& [key, value] : document.items()) {
    if (!documented.allowed.count(key)) out += "printed but not documented: " + key + "; ";
  }
  for (const std::string& field : documented.required) {
    if (!document.contains(field)) out += "documented but not printed: " + field + "; ";
  }
  return out;
}

}  // namespace kiln::testing
