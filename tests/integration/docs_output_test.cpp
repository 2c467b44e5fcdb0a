// What docs/cli.md says of the commands' JSON output is what they print: the fields its table
// lists for `nodes`, `jobs`, `result`, `leases` and `queue ID` are exactly the keys of the real
// command's document, on a fleet of one node.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// The fields docs/cli.md lists for `command` in its "JSON output" table: the backquoted names
// of the last column, leaving out those in parentheses (an entry's own fields, remarks).
std::set<std::string> documented_fields(const std::string& command) {
  std::ifstream in(std::filesystem::path(KILN_SOURCE_DIR) / "docs" / "cli.md");
  const std::string row_start = "| `" + command + "` |";
  bool in_json_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_json_section = line == "## JSON output";
    if (!in_json_section || line.rfind(row_start, 0) != 0) continue;
    const std::string fields = line.substr(line.rfind('|', line.size() - 2) + 1);
    std::set<std::string> names;
    int depth = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (fields[i] == '(') ++depth;
      if (fields[i] == ')') --depth;
      if (fields[i] == '`') {
        const std::size_t end = fields.find('`', i + 1);
        if (depth == 0) names.insert(fields.substr(i + 1, end - i - 1));
        i = end;
      }
    }
    return names;
  }
  FAIL("docs/cli.md has no JSON row for " << command);
  return {};
}

// "" when the document's keys are the documented fields, else what differs.
std::string difference(const nlohmann::json& document, const std::set<std::string>& documented) {
  std::string out;
  for (const auto& [key, value] : document.items()) {
    if (!documented.count(key)) out += "printed but not documented: " + key + "; ";
  }
  for (const std::string& field : documented) {
    if (!document.contains(field)) out += "documented but not printed: " + field + "; ";
  }
  return out;
}

nlohmann::json json_of(Fleet& fleet, const std::vector<std::string>& args) {
  std::string output;
  std::vector<std::string> with_json = args;
  with_json.push_back("--json");
  REQUIRE(fleet.kiln("ops", with_json, &output) == 0);
  const nlohmann::json document = nlohmann::json::parse(output, nullptr, false);
  REQUIRE_MESSAGE(!document.is_discarded(), output);
  return document;
}

}  // namespace

TEST_CASE("the JSON fields docs/cli.md lists are the ones the commands print") {
  Fleet fleet("docs-output");
  auto ops = start_one_node(fleet, "ops", "ops");
  SubmitJob smoke;
  smoke.workload = "smoke";
  const std::uint64_t id = submit(*ops, smoke);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*ops, id, JobState::succeeded); }, 30s));
  std::string leased;
  REQUIRE(fleet.kiln("ops", {"lease", "--chips", "1", "--duration", "30m", "--detach"}, &leased) == 0);

  const nlohmann::json nodes = json_of(fleet, {"nodes"});
  REQUIRE((nodes.is_array() && !nodes.empty()));
  CHECK(difference(nodes[0], documented_fields("nodes")) == "");

  const nlohmann::json jobs = json_of(fleet, {"jobs"});
  REQUIRE((jobs.is_array() && !jobs.empty()));
  CHECK(difference(jobs[0], documented_fields("jobs")) == "");

  const nlohmann::json result = json_of(fleet, {"result", std::to_string(id)});
  CHECK(difference(result, documented_fields("result`, `submit --wait")) == "");

  const nlohmann::json leases = json_of(fleet, {"leases"});
  REQUIRE((leases.is_array() && !leases.empty()));
  CHECK(difference(leases[0], documented_fields("leases")) == "");

  const nlohmann::json queue = json_of(fleet, {"queue", std::to_string(id)});
  CHECK(difference(queue, documented_fields("queue ID")) == "");
}
