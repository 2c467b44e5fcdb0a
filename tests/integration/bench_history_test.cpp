// kiln-bench-history on a small store: the real coordinator started on it holds only the live
// jobs (the newest ended ones and the queued ones), or every job when told to, and the keys of the
// qualification records only; it answers for the oldest job and report either way. Only the figures' form and the jobs held are checked, never a timing.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"

using namespace kiln::testing;

TEST_CASE("kiln-bench-history: the coordinator starts from the live jobs and the records' keys, and reads the "
          "oldest back") {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("kiln-bench-history-test-" + std::to_string(::getpid()) + ".json");
  const Ran ran = run("{ " + bin("kiln-bench-history") + " --jobs 300,600 --held 50 --run-reports 40 --report-kb 4 --repeats 1 --gets 5 --json > " +
                      out.string() + "; }");
  INFO(ran.output);
  REQUIRE(ran.status == 0);
  std::ifstream in(out);
  const auto rows = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::filesystem::remove(out);
  REQUIRE(rows.is_array());
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    INFO(row.dump());
    const auto stored = row["jobs_stored"].get<std::size_t>();
    // The newest 50 ended jobs and the 10 queued ones; every job when all are held.
    CHECK(row["live"]["jobs_held"] == 60);
    CHECK(row["every_job"]["jobs_held"] == stored);
    for (const char* run : {"live", "every_job"}) {
      CHECK(row[run]["serves_after_s"].get<double>() > 0);
      CHECK(row[run]["resident_mb"].get<double>() > 1);
      // Every get_job answered, the oldest job's included.
      CHECK(row[run]["get_held_job_us"].get<double>() > 0);
      CHECK(row[run]["get_oldest_job_us"].get<double>() > 0);
      // The run reports, and their runs' changes, requests and claims, stay in the store, and each
      // is read from there when asked for: the coordinator holds none of them, not even their keys.
      CHECK(row[run]["records_held"] == 0);
      CHECK(row[run]["get_newest_run_report_us"].get<double>() > 0);
      CHECK(row[run]["get_oldest_run_report_us"].get<double>() > 0);
      // Every list read to its end (a failed one is null).
      CHECK(row[run]["list_every_run_report_ms"].is_number());
      CHECK(row[run]["list_latest_100_run_reports_ms"].is_number());
      CHECK(row[run]["list_every_change_ms"].is_number());
      CHECK(row[run]["list_changes_since_newest_ms"].is_number());
      CHECK(row[run]["list_change_by_key_prefix_ms"].is_number());
    }
    CHECK(row["load_live_ms"].get<double>() > 0);
    CHECK(row["store_mb"].get<double>() > 0);
  }
}
