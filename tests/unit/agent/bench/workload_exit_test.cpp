// Correctness comes from the result document, not the exit code (docs/workloads.md).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "agent/bench/workload_exit.h"

namespace ab = kiln::agent::bench;

namespace {

std::string result_document(bool passed, const char* status = "completed") {
  return nlohmann::json{{"schema", "kiln.workload-result/1"},
                        {"model", "cnn-small"},
                        {"dtype", "fp32"},
                        {"status", status},
                        {"passed", passed},
                        {"correctness", {{"checked", true}, {"passed", passed}}},
                        {"benchmark", nullptr}}
      .dump();
}

}  // namespace

TEST_CASE("a valid result document is judged from it, whatever the exit code") {
  for (int code : {0, 1, 2, 3, 137}) {
    CAPTURE(code);
    const auto wrong = ab::judge_workload_end(code, result_document(false), std::nullopt);
    CHECK(wrong.end == ab::WorkloadEnd::incorrect);
    REQUIRE(wrong.result.has_value());
    CHECK_FALSE(wrong.result->passed);
    const auto right = ab::judge_workload_end(code, result_document(true), std::nullopt);
    CHECK(right.end == ab::WorkloadEnd::passed);
    // A code that disagrees with the document is said, so a person sees what the program returned.
    CHECK((right.detail.find("exited with code " + std::to_string(code)) != std::string::npos) == (code != 0));
  }
  CHECK(ab::judge_workload_end(0, result_document(true, "preempted"), std::nullopt).end == ab::WorkloadEnd::passed);
}

TEST_CASE("an exit without a valid result document is a crash, whatever the code (Python's 1 included)") {
  for (int code : {1, 2, 3}) {
    CAPTURE(code);
    const auto crashed = ab::judge_workload_end(code, "", std::nullopt);
    CHECK(crashed.end == ab::WorkloadEnd::crashed);
    CHECK_FALSE(crashed.result.has_value());
    CHECK(crashed.detail.find("without a result document: a crash, not a correctness verdict") != std::string::npos);
  }
  // A half-written or lying document is not a verdict either.
  const auto garbled = ab::judge_workload_end(1, R"({"schema": "kiln.workload-result/1", "model": "m"})", std::nullopt);
  CHECK(garbled.end == ab::WorkloadEnd::crashed);
  CHECK(garbled.detail.find("breaks the contract") != std::string::npos);
  // A benchmark job must write one even when it exits 0.
  const kiln::BenchmarkSettings asked;
  CHECK(ab::judge_workload_end(0, "", asked).end == ab::WorkloadEnd::crashed);
  CHECK(ab::judge_workload_end(0, result_document(true), asked).end == ab::WorkloadEnd::crashed);
}

TEST_CASE("programs that write no workload result keep their exit code's meaning") {
  CHECK(ab::judge_workload_end(0, "", std::nullopt).end == ab::WorkloadEnd::exited);
  // The agent's own jobs (an install report) are not workload results.
  CHECK(ab::judge_workload_end(1, R"({"schema": "kiln.install-report/1"})", std::nullopt).end == ab::WorkloadEnd::other);
  CHECK(ab::judge_workload_end(0, "plain text", std::nullopt).end == ab::WorkloadEnd::other);
}
