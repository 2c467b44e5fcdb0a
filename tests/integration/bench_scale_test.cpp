// kiln-bench-scale --quick: a real coordinator and the echo under a few dozen fake agents. Only
// that it runs and that its figures are well-formed is checked, never a timing.
#include <doctest/doctest.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"

using namespace kiln::testing;

namespace {

// Runs the bench with `arguments` and returns its --json figures; the progress lines (stderr)
// are kept for a failure.
nlohmann::json bench_figures(const std::string& arguments) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kiln-bench-scale-test-" + std::to_string(::getpid()) + ".json");
  const Ran ran = run("{ " + bin("kiln-bench-scale") + " " + arguments + " --json > " + out.string() + "; }");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  std::ifstream in(out);
  auto figures = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::filesystem::remove(out);
  REQUIRE(figures.is_object());
  REQUIRE(figures["rows"].is_array());
  return figures;
}

void check_row(const nlohmann::json& row) {
  INFO(row.dump());
  CHECK(row["agents"].get<int>() > 0);
  CHECK(row["registered"].get<int>() <= row["agents"].get<int>());
  for (const char* latency : {"heartbeat", "echo_heartbeat", "submit", "echo_submit", "durable_echo_submit", "lease",
                              "echo_lease", "durable_echo_lease", "booked_lease", "echo_booked_lease"}) {
    CHECK(row[latency]["samples"].is_number_unsigned());
    if (row[latency]["samples"].get<int>() > 0) {
      CHECK(row[latency]["p50_ms"].get<double>() >= 0);
      CHECK(row[latency]["p99_ms"].get<double>() >= row[latency]["p50_ms"].get<double>());
      CHECK(row[latency]["max_ms"].get<double>() >= row[latency]["p99_ms"].get<double>());
    }
  }
  // What the timing client itself waited for a CPU, once per timed submit and lease.
  for (const char* server : {"", "echo_"}) {
    const auto& waited = row[std::string(server) + "timing_client_waited"];
    CHECK(waited["samples"] == row[std::string(server) + "submit"]["samples"].get<int>() +
                                   row[std::string(server) + "lease"]["samples"].get<int>());
    CHECK(waited["p99_ms"].get<double>() >= 0);
  }
  // The durable echo answers every request of the same loop as the plain one.
  CHECK(row["durable_echo_submit"]["samples"] == row["echo_submit"]["samples"]);
  CHECK(row["durable_echo_lease"]["samples"] == row["echo_lease"]["samples"]);
  for (const char* figure : {"cpu_per_heartbeat_ms", "cpu_percent", "load_generator_cpu_percent",
                             "echo_load_generator_cpu_percent", "submit_jobs_per_second", "submit_p99_vs_echo",
                             "submit_p99_vs_durable_echo", "lease_p99_vs_echo", "lease_p99_vs_durable_echo"}) {
    CHECK((row[figure].is_null() || row[figure].get<double>() >= 0));
  }
  CHECK(row["lost"].is_number_unsigned());
  // Each server's peak memory, as the kernel has it: a server holds at least its binary's pages.
  CHECK(row["peak_resident_mb"].get<double>() > 1);
  CHECK(row["echo_peak_resident_mb"].get<double>() > 1);
}

}  // namespace

TEST_CASE("kiln-bench-scale --quick measures the coordinator, the echo and the durable echo") {
  const auto figures = bench_figures("--quick");
  REQUIRE(figures["rows"].size() == 2);
  for (const auto& row : figures["rows"]) {
    check_row(row);
    // Root may raise the timing client above the fake agents.
    if (::geteuid() == 0) {
      CHECK(row["timing_client_real_time"] == true);
      CHECK(row["echo_timing_client_real_time"] == true);
    }
    // Small fleets run in the bench's own process.
    CHECK(row["agent_processes"] == 1);
    CHECK(row["durable_echo_submit"]["samples"].get<int>() > 0);
    // Leases booked a day ahead were each left waiting, answered with why.
    CHECK(row["booked_lease"]["samples"].get<int>() > 0);
    CHECK(row["booked_lease"]["samples"] == row["echo_booked_lease"]["samples"]);
    // The coordinator's own time for the same requests, read from its /metrics around them.
    for (const char* type : {"submit", "lease"}) {
      const auto& own = row[std::string("coordinator_own_") + type];
      CHECK(own["requests"] == row[type]["samples"]);
      CHECK(own["p99_at_most_ms"].get<double>() >= own["p50_at_most_ms"].get<double>());
    }
    // A few dozen agents cost the servers milliseconds a second, under the 10 ms tick of
    // /proc/PID/stat: the figures are read in nanoseconds, so they are never 0.
    CHECK(row["cpu_per_heartbeat_ms"].get<double>() > 0);
    CHECK(row["echo_cpu_per_heartbeat_ms"].get<double>() > 0);
  }
  // The stall is at the largest size only.
  CHECK_FALSE(figures["rows"][0].contains("stall"));
  const auto& stall = figures["rows"][1]["stall"];
  REQUIRE(stall.is_object());
  CHECK(stall["largest_100ms_slot"].get<int>() <= stall["hellos"].get<int>());
  // A client's submits were timed while the coordinator caught up after the stall.
  CHECK(stall["submit_while_recovering"]["samples"].get<int>() > 0);
  CHECK(stall["submit_while_recovering"]["max_ms"].get<double>() >=
        stall["submit_while_recovering"]["p50_ms"].get<double>());
  CHECK(figures["extrapolation"]["agents"] == 10000);
  CHECK(figures["extrapolation"]["cpu_percent"].get<double>() > 0);
}

TEST_CASE("kiln-bench-scale runs a fleet split over processes and sums what they saw") {
  // What a fleet beyond one process's file limit does, at a size that fits.
  const auto figures = bench_figures("--quick --agents 40 --agent-processes 2 --no-timing-priority");
  REQUIRE(figures["rows"].size() == 1);
  const auto& row = figures["rows"][0];
  check_row(row);
  // Asked for none, the timing client stayed at normal priority.
  CHECK(row["timing_client_real_time"] == false);
  CHECK(row["echo_timing_client_real_time"] == false);
  CHECK(row["agent_processes"] == 2);
  // Both slices' agents (20 each) registered, counted together, and answered heartbeats.
  CHECK(row["echo_registered"] == 40);
  CHECK(row["registered"] == 40);
  CHECK(row["heartbeat"]["samples"].get<int>() > 0);
  // Hello times came back from both processes.
  const auto& stall = row["stall"];
  REQUIRE(stall.is_object());
  CHECK(stall["hellos"].get<int>() > 0);
}

TEST_CASE("kiln-bench-scale --repeats alternates the echo and the coordinator and gives the medians") {
  const auto figures = bench_figures("--quick --agents 20 --repeats 3 --no-stall");
  REQUIRE(figures["rows"].size() == 3);
  for (const auto& row : figures["rows"]) check_row(row);
  REQUIRE(figures["medians"].size() == 1);
  const auto& medians = figures["medians"][0];
  INFO(medians.dump());
  CHECK(medians["agents"] == 20);
  CHECK(medians["repeats"] == 3);
  // The median of three is one of the three.
  for (const char* figure : {"cpu_percent", "echo_cpu_percent", "submit_p50_ms", "lease_p50_ms",
                             "submit_jobs_per_second"}) {
    std::vector<double> values;
    for (const auto& row : figures["rows"]) {
      const auto& source = std::string(figure) == "echo_cpu_percent" ? row["echo_cpu_percent"]
                           : std::string(figure) == "submit_p50_ms"  ? row["submit"]["p50_ms"]
                           : std::string(figure) == "lease_p50_ms"   ? row["lease"]["p50_ms"]
                                                                      : row[figure];
      values.push_back(source.get<double>());
    }
    std::sort(values.begin(), values.end());
    CHECK(medians[figure].get<double>() == doctest::Approx(values[1]));
  }
  for (const char* ratio : {"heartbeat_p99_vs_echo", "submit_p99_vs_echo", "submit_p99_vs_durable_echo",
                            "lease_p99_vs_echo", "lease_p99_vs_durable_echo"}) {
    CHECK((medians[ratio].is_null() || medians[ratio].get<double>() > 0));
  }
}

TEST_CASE("kiln-bench-scale gives the server a CPU of its own, and --no-pin lets it share them") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  const std::size_t cpus = static_cast<std::size_t>(CPU_COUNT(&allowed));
  if (cpus < 2) return;  // one CPU: nothing to pin apart
  const auto pinned = bench_figures("--quick --agents 20 --no-stall");
  REQUIRE(pinned["server_cpus"].size() == 1);
  const int server_cpu = pinned["server_cpus"][0].get<int>();
  const auto& load = pinned["load_cpus"];
  CHECK_FALSE(load.empty());
  CHECK(std::find(load.begin(), load.end(), server_cpu) == load.end());
  // The kernel's own view of where the coordinator and the echo ran.
  for (const char* server : {"server_cpus", "echo_cpus"}) {
    CAPTURE(server);
    CHECK(pinned["rows"][0][server] == nlohmann::json::array({server_cpu}));
  }

  const auto shared = bench_figures("--quick --agents 20 --no-stall --no-pin");
  CHECK(shared["server_cpus"].empty());
  CHECK(shared["rows"][0]["server_cpus"].size() == cpus);
}
