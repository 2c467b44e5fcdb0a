// The CPU backend as a real node, end to end with the real binaries: an agent on
// libkiln_cpu_driver.so registers revision `cpu` with a healthy chip (the host) and the backend
// label `cpu`, reports the host's health, and runs `kiln submit --rev cpu` jobs to the end; a
// workload is judged from its result document, not its exit code (docs/workloads.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/run_command.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// A shell workload that writes a valid result document saying `passed`, then exits with `code`.
SubmitJob judged_by_document(bool passed, int code) {
  const std::string document = nlohmann::json{{"schema", "kiln.workload-result/1"},
                                               {"model", "tiny-cnn"},
                                               {"dtype", "fp32"},
                                               {"status", "completed"},
                                               {"passed", passed},
                                               {"benchmark", nullptr}}
                                   .dump();
  SubmitJob job;
  job.workload = "shell";
  job.hardware_revision = "cpu";
  job.args = {"-c", "printf '%s' '" + document + "' > \"$KILN_RESULT_FILE.tmp\" && mv \"$KILN_RESULT_FILE.tmp\" "
                    "\"$KILN_RESULT_FILE\"; exit " + std::to_string(code)};
  return job;
}

}  // namespace

TEST_CASE("an agent on the CPU backend is a real node: revision cpu, a healthy chip, host health, --rev cpu jobs") {
  Fleet fleet("cpu-node");
  AgentSpec spec("c01", "cpu");
  spec.cpu_backend = true;
  auto dev = start_nodes(fleet, {spec});

  // What ops run before starting it: the config is accepted, firmware-less chip and all.
  const auto checked = run(bin("kiln-agent") + " check-config --config " + fleet.agent_config("c01").string(), 120s);
  CHECK_MESSAGE(checked.status == 0, checked.output);
  CHECK(checked.output.find("driver: kiln-cpu 0.1.0, 1 chips of revision cpu") != std::string::npos);
  CHECK(checked.output.find("would be reported unhealthy") == std::string::npos);

  auto up = node(*dev, "c01");
  REQUIRE(up.has_value());
  CHECK(up->hardware_revision == "cpu");
  REQUIRE(up->chips.size() == 1);
  CHECK(up->chips[0].healthy);
  CHECK(std::count(up->labels.begin(), up->labels.end(), "backend=cpu") == 1);

  // The first probe reports the host's health; nothing in it fails on a host without firmware.
  REQUIRE_MESSAGE(Fleet::eventually(
                      [&] {
                        auto n = node(*dev, "c01");
                        return n && n->health != HealthStatus::unknown;
                      },
                      30s),
                  fleet.log_of("c01"));
  up = node(*dev, "c01");
  CHECK_MESSAGE(up->health != HealthStatus::fail, up->health_detail);
  CHECK(up->state == NodeState::up);

  // The shipped smoke workload, as a user types it.
  std::string out;
  REQUIRE_MESSAGE(fleet.kiln("dev", {"--json", "submit", "--workload", "smoke", "--rev", "cpu", "--wait"}, &out, 120s) == 0,
                  out);
  const auto smoke = nlohmann::json::parse(out);
  CHECK(smoke["job"]["node_id"] == "c01");
  const auto smoke_result = nlohmann::json::parse(smoke["result"].get<std::string>());
  CHECK(smoke_result["passed"] == true);
  CHECK(smoke_result["chips"][0]["hardware_revision"] == "cpu");

  // Judged from the document whatever the code: exit 3 with "passed" succeeds, exit 0 with
  // "not passed" fails as a correctness verdict (exit code 1, the document kept).
  const auto passed = submit(*dev, judged_by_document(true, 3));
  const auto wrong = submit(*dev, judged_by_document(false, 0));
  // A crash (Python's exit 1 on an uncaught exception) without a document is no verdict.
  SubmitJob crash;
  crash.workload = "shell";
  crash.hardware_revision = "cpu";
  crash.args = {"-c", "echo 'Traceback (most recent call last):' >&2; exit 1"};
  const auto crashed = submit(*dev, crash);
  for (auto id : {passed, wrong, crashed}) REQUIRE(Fleet::eventually([&] { return job_ended(*dev, id); }, 60s));

  const auto passed_detail = job(*dev, passed);
  CHECK_MESSAGE(passed_detail->job.state == JobState::succeeded, passed_detail->job.detail);
  CHECK(passed_detail->job.exit_code == 0);
  CHECK(passed_detail->job.detail.find("exited with code 3") != std::string::npos);
  CHECK(passed_detail->job.node_id == "c01");

  const auto wrong_detail = job(*dev, wrong);
  CHECK(wrong_detail->job.state == JobState::failed);
  CHECK(wrong_detail->job.exit_code == 1);
  CHECK(nlohmann::json::parse(wrong_detail->result)["passed"] == false);

  const auto crashed_detail = job(*dev, crashed);
  CHECK(crashed_detail->job.state == JobState::failed);
  CHECK(crashed_detail->result.empty());
  CHECK(crashed_detail->job.detail.find("a crash, not a correctness verdict") != std::string::npos);
}
