#include <doctest/doctest.h>

#include "cli/cli_options.h"
#include "cli/duration.h"
#include "cli/ids.h"

using kiln::cli::parse_duration_ms;

TEST_CASE("durations are a number and a unit, parts added up") {
  CHECK(*parse_duration_ms("90s", "--timeout") == 90'000);
  CHECK(*parse_duration_ms("30m", "--timeout") == 1'800'000);
  CHECK(*parse_duration_ms("2h", "--timeout") == 7'200'000);
  CHECK(*parse_duration_ms("1h30m", "--timeout") == 5'400'000);
  CHECK(*parse_duration_ms("1.5h", "--timeout") == 5'400'000);
  CHECK(*parse_duration_ms("500ms", "--timeout") == 500);
  CHECK(*parse_duration_ms("1d", "--timeout") == 86'400'000);
}

TEST_CASE("a bad duration says what was wrong and what one looks like") {
  for (const char* bad : {"", "30", "m", "1x", "1.h", "1..5h", "-5m", "0s", "2h30", "400d"}) {
    CAPTURE(bad);
    auto parsed = parse_duration_ms(bad, "--duration");
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().code == kiln::Errc::invalid_argument);
    CHECK(parsed.error().message.find("--duration") == 0);
    CHECK(parsed.error().message.find("give a duration such as 90s, 30m, 2h or 1h30m") != std::string::npos);
  }
  CHECK(parse_duration_ms("1x", "--duration").error().message.find("'x' is not a unit") != std::string::npos);
}

TEST_CASE("durations are printed in the same units") {
  CHECK(kiln::cli::duration_text(850) == "850ms");
  CHECK(kiln::cli::duration_text(4200) == "4.2s");
  CHECK(kiln::cli::duration_text(187'000) == "3m07s");
  CHECK(kiln::cli::duration_text(7'500'000) == "2h05m");
}

TEST_CASE("job ids are 42 or J42, lease ids L3") {
  CHECK(*kiln::cli::parse_job_id("42") == 42);
  CHECK(*kiln::cli::parse_job_id("J42") == 42);
  CHECK_FALSE(kiln::cli::parse_job_id("L42"));
  CHECK(*kiln::cli::parse_lease_id("L3") == 3);
  auto lease = kiln::cli::parse_job_or_lease_id("l3");
  REQUIRE(lease);
  CHECK(lease->lease_id == 3);
  CHECK(lease->job_id == 0);
  auto job = kiln::cli::parse_job_or_lease_id("j12");
  REQUIRE(job);
  CHECK(job->job_id == 12);
  CHECK(kiln::cli::parse_job_or_lease_id("x1").error().message.find("neither a job id") != std::string::npos);
}

TEST_CASE("a mistyped command's near names come first by distance") {
  const std::vector<std::string> names = {"nodes", "jobs", "lease", "leases", "release-lease", "queue"};
  CHECK(kiln::cli::near_names("nods", names) == std::vector<std::string>{"nodes", "jobs"});
  CHECK(kiln::cli::near_names("leas", names) == std::vector<std::string>{"lease", "leases"});
  CHECK(kiln::cli::near_names("zzzzzzzz", names).empty());
}
