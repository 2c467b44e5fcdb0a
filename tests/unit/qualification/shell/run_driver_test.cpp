// The driver against a coordinator that does not answer a submission: the job must not be
// counted as refused (it may have been taken; the run resumes from the store), so the driver
// stops and leaves the verdict to the run's next driver.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>
#include <variant>

#include "qualification/model_set.h"
#include "qualification/run.h"
#include "qualification/shell/run_driver.h"
#include "tests/integration/qualification_samples.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
namespace protocol = kiln::protocol;
using kiln::Errc;

namespace {

// Knows one healthy node and no jobs, and answers every submission with `submit_error`.
class UnansweringCoordinator final : public kiln::cli::Client {
 public:
  explicit UnansweringCoordinator(kiln::Error submit_error) : submit_error_(std::move(submit_error)) {}

  kiln::Result<protocol::Body> request(protocol::Body body) override {
    if (std::holds_alternative<protocol::ListJobs>(body)) return protocol::JobList{};
    if (std::holds_alternative<protocol::ListNodes>(body)) {
      protocol::NodeList list;
      protocol::NodeSummary node;
      node.node_id = "n1";
      node.hardware_revision = "a";
      node.health = protocol::HealthStatus::pass;
      node.chips_total = 8;
      list.nodes.push_back(node);
      return list;
    }
    if (std::holds_alternative<protocol::SubmitJob>(body)) ++submissions;
    return tl::unexpected(submit_error_);
  }

  int submissions = 0;

 private:
  kiln::Error submit_error_;
};

class NoBuilds final : public qs::BundleBuilder {
 public:
  kiln::Result<q::Bundle> build(const std::vector<q::Change>&, std::size_t) override {
    return kiln::fail(Errc::internal, "no bundle is built in this test");
  }
};

class NoTickets final : public q::TicketSink {
 public:
  kiln::Result<q::FileResult> file(const q::Ticket&) override {
    return kiln::fail(Errc::internal, "no ticket is filed in this test");
  }
};

kiln::Result<q::RunReport> drive_one_model(UnansweringCoordinator& coordinator) {
  auto set = q::parse_model_set(kiln::testing::kModelSet, "models.toml");
  REQUIRE(set);
  auto history = q::parse_change_history(kiln::testing::kHistory, "history.toml", 1000);
  REQUIRE(history);
  q::RunInput input;
  input.settings.tier = q::Tier::smoke;
  input.settings.run_id = "smoke-unanswered";
  input.settings.revisions = {"a"};
  q::Bundle candidate;
  candidate.hardware_revisions = {"a"};
  candidate.change_count = 1;
  candidate.last_change = "k1";
  input.candidate = q::seal(candidate);
  input.models = {*set->find("mlp-bf16-it")};
  input.set = *set;
  input.history = *history;
  auto run = q::QualificationRun::start(std::move(input), 1000);
  REQUIRE(run);
  kiln::testing::TempDir dir("kiln-run-driver");
  NoBuilds builder;
  NoTickets tickets;
  qs::DriverOptions options;
  options.bundle_dir = dir.path();
  options.golden_dir = dir.path();
  options.poll_interval_ms = 1;
  return qs::drive_run(coordinator, *run, *set, *history, builder, tickets, options);
}

}  // namespace

TEST_CASE("a submission the coordinator did not answer stops the driver instead of costing the job an attempt") {
  for (const auto code : {Errc::unavailable, Errc::timeout, Errc::io}) {
    const std::string code_name(kiln::to_string(code));
    CAPTURE(code_name);
    UnansweringCoordinator coordinator({code, "the connection dropped"});
    auto report = drive_one_model(coordinator);
    REQUIRE_FALSE(report);
    CHECK(kiln::testing::contains(report.error().message, "did not take the job for now"));
    CHECK(coordinator.submissions == 1);
  }
}

TEST_CASE("a submission the coordinator refused costs the job its attempts and ends in an error verdict") {
  UnansweringCoordinator coordinator({Errc::invalid_argument, "no such workload"});
  auto report = drive_one_model(coordinator);
  REQUIRE(report);
  CHECK(coordinator.submissions == 2);
  REQUIRE(report->models.size() == 1);
  CHECK(report->models[0].verdict == q::ModelVerdict::error);
  CHECK(kiln::testing::contains(report->models[0].detail, "did not run after 2 attempts"));
}

TEST_CASE("a model's goldens reach its job in either tensor format, and no other model's files do") {
  auto set = q::parse_model_set(kiln::testing::kModelSet, "models.toml");
  REQUIRE(set);
  kiln::testing::TempDir dir("kiln-job-files");
  for (const char* name : {"mlp-bf16.golden.json", "mlp-bf16.safetensors", "mlp-bf16.logits.npy",
                           "mlp-bf16.hidden.npy", "mlp-fp8.logits.npy", "mlp-bf16.notes.txt"}) {
    std::ofstream(dir.path() / name) << "x";
  }
  qs::DriverOptions options;
  options.bundle_dir = dir.path();
  options.golden_dir = dir.path();
  q::JobRequest request;
  request.model = "mlp-bf16-it";
  auto files = qs::job_files(request, *set, options);
  REQUIRE(files);
  std::vector<std::string> names;
  for (const auto& path : files->golden) names.push_back(path.filename().string());
  CHECK(names == std::vector<std::string>{"mlp-bf16.golden.json", "mlp-bf16.hidden.npy", "mlp-bf16.logits.npy",
                                          "mlp-bf16.safetensors"});
}
