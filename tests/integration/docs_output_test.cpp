// What docs/cli.md says of the commands' JSON output is what they print: the fields its table
// lists for `nodes`, `jobs`, `result`, `leases` and `queue ID` are exactly the keys of the real
// command's document, on a fleet of one node (qualification_test holds `changes`, `bundles`,
// `runs` and `tickets` to the same table after its nightlies).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/documented_fields.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

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
