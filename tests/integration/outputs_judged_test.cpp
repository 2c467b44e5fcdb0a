// kiln judges a workload's outputs itself (docs/workloads.md, "Outputs kiln judges"): a shell
// workload writes an output as .npy and lists it in its result document; the agent compares it
// with the golden of the same name among the job's artifacts and the job ends by kiln's verdict.
#include <doctest/doctest.h>

#include <filesystem>

#include "common/numerics/tensor_io.h"
#include "common/protocol/messages.h"
#include "qualification/shell/artifact_upload.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"

using namespace kiln;
using namespace kiln::protocol;
using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

ArtifactRef upload_tensor(cli::Client& client, const fs::path& dir, const std::string& name,
                          const numerics::Tensor& tensor) {
  const fs::path path = dir / name;
  REQUIRE(numerics::write_npy_file(path, tensor).has_value());
  auto uploaded = qualification::shell::upload_artifact(client, name, path);
  REQUIRE_MESSAGE(uploaded.has_value(), uploaded.error().message);
  return *uploaded;
}

// Copies its "computed" output into place and claims `passed`, as a workload that compares
// itself too leniently would.
SubmitJob claiming_passed(const ArtifactRef& golden, const ArtifactRef& computed) {
  SubmitJob job;
  job.workload = "shell";
  job.args = {"-c",
              "mkdir -p \"$KILN_WORK_DIR/out\" && cp \"$1\" \"$KILN_WORK_DIR/out/logits.npy\" && "
              "printf '%s' '{\"schema\":\"kiln.workload-result/1\",\"model\":\"tiny\",\"dtype\":\"fp32\","
              "\"status\":\"completed\",\"passed\":true,\"outputs\":[{\"name\":\"logits\",\"file\":\"out/logits.npy\"}]}' "
              "> \"$KILN_RESULT_FILE\"",
              "sh", "{artifact:" + computed.name + "}"};
  job.priority_class = PriorityClass::nightly;
  job.max_attempts = 1;
  job.artifacts = {golden, computed};
  return job;
}

}  // namespace

TEST_CASE("the agent judges a workload's listed output against its .npy golden: a wrong one fails though it says passed") {
  Fleet fleet("outputs-judged");
  fleet.add_key("ci", "ci");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto ci = fleet.client("ci");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ci, "n01", NodeState::up); }, 15s));

  const fs::path files = fleet.dir() / "tensors";
  fs::create_directories(files);
  const numerics::Tensor golden{numerics::DType::f32, {2, 2}, {1.0, 2.0, 3.0, 4.0}};
  const auto golden_ref = upload_tensor(*ci, files, "tiny.logits.npy", golden);
  const auto right = upload_tensor(*ci, files, "right.npy", golden);
  const auto wrong = upload_tensor(*ci, files, "wrong.npy", numerics::Tensor{numerics::DType::f32, {2, 2}, {1.0, 2.0, 3.5, 4.0}});

  JobDetail matching = run_to_end(*ci, claiming_passed(golden_ref, right));
  REQUIRE_MESSAGE(matching.job.state == JobState::succeeded, matching.job.detail);
  const auto kept = nlohmann::json::parse(matching.result);
  CHECK(kept.at("kiln_verdict").at("passed") == true);
  CHECK(kept.at("kiln_verdict").at("outputs").at(0).at("report").at("element_count") == 4);

  JobDetail differing = run_to_end(*ci, claiming_passed(golden_ref, wrong));
  CHECK(differing.job.state == JobState::failed);
  CHECK(differing.job.exit_code == 1);
  INFO(differing.job.detail);
  CHECK(differing.job.detail.find("the workload says passed but kiln's comparison fails; the two disagree") !=
        std::string::npos);
  CHECK(differing.job.detail.find("worst element [1, 0] expected 3, actual 3.5") != std::string::npos);
  const auto verdict = nlohmann::json::parse(differing.result).at("kiln_verdict");
  CHECK(verdict.at("agree") == false);
  CHECK(verdict.at("outputs").at(0).at("report").at("worst").at(0).at("index") == nlohmann::json::array({1, 0}));
}
