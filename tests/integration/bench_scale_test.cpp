// kiln-bench-scale --quick: a real coordinator and the echo under a few dozen fake agents. Only
// that it runs and that its figures are well-formed is checked, never a timing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"

using namespace kiln::testing;

TEST_CASE("kiln-bench-scale --quick measures the coordinator and the echo and reports well-formed figures") {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kiln-bench-scale-test-" + std::to_string(::getpid()) + ".json");
  // The figures to a file, the progress lines (stderr) to the output kept for a failure.
  const Ran ran = run("{ " + bin("kiln-bench-scale") + " --quick --json > " + out.string() + "; }");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  std::ifstream in(out);
  const auto figures = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::filesystem::remove(out);
  REQUIRE(figures.is_object());
  REQUIRE(figures["rows"].is_array());
  REQUIRE(figures["rows"].size() == 2);
  for (const auto& row : figures["rows"]) {
    INFO(row.dump());
    CHECK(row["agents"].get<int>() > 0);
    CHECK(row["registered"].get<int>() <= row["agents"].get<int>());
    for (const char* latency : {"heartbeat", "echo_heartbeat", "submit", "echo_submit", "lease", "echo_lease"}) {
      CHECK(row[latency]["samples"].is_number_unsigned());
      if (row[latency]["samples"].get<int>() > 0) {
        CHECK(row[latency]["p50_ms"].get<double>() >= 0);
        CHECK(row[latency]["p99_ms"].get<double>() >= row[latency]["p50_ms"].get<double>());
      }
    }
    for (const char* figure : {"cpu_per_heartbeat_ms", "cpu_percent", "submit_jobs_per_second"}) {
      CHECK((row[figure].is_null() || row[figure].get<double>() >= 0));
    }
    CHECK(row["lost"].is_number_unsigned());
  }
  // The stall is at the largest size only.
  CHECK_FALSE(figures["rows"][0].contains("stall"));
  const auto& stall = figures["rows"][1]["stall"];
  REQUIRE(stall.is_object());
  CHECK(stall["largest_100ms_slot"].get<int>() <= stall["hellos"].get<int>());
  CHECK(figures["extrapolation"]["agents"] == 10000);
}
