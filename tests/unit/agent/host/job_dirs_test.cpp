// The job directory retention's choice: finished directories past the age go, then the oldest
// finished ones while all of them take more than the size limit; a running job's never.
#include <doctest/doctest.h>

#include "agent/host/job_dirs.h"

namespace kiln::agent {
namespace {

constexpr TimeMs kNow = 100 * kHourMs;
constexpr JobDirLimits kLimits{24 * kHourMs, 1000};

JobDir dir(const std::string& name, DurationMs age_ms, std::uint64_t bytes, bool running = false) {
  return JobDir{name, kNow - age_ms, bytes, running};
}

}  // namespace

TEST_CASE("job directories older than the age limit go, younger ones under the size limit stay") {
  const auto removed = job_dirs_to_remove({dir("job-2-1", kHourMs, 10), dir("job-1-1", 30 * kHourMs, 10)}, kLimits,
                                          kNow);
  CHECK(removed == std::vector<std::string>{"job-1-1"});
  CHECK(job_dirs_to_remove({dir("job-1-1", kHourMs, 10)}, kLimits, kNow).empty());
}

TEST_CASE("over the size limit the oldest finished directories go first, until the rest fits") {
  const auto removed = job_dirs_to_remove(
      {dir("job-3-1", 1 * kHourMs, 400), dir("job-1-1", 3 * kHourMs, 400), dir("job-2-1", 2 * kHourMs, 400)}, kLimits,
      kNow);
  CHECK(removed == std::vector<std::string>{"job-1-1"});
}

TEST_CASE("a running job's directory is never removed, and its size makes finished ones go") {
  const auto removed = job_dirs_to_remove(
      {dir("job-1-1", 50 * kHourMs, 5000, /*running=*/true), dir("job-2-1", 2 * kHourMs, 10)}, kLimits, kNow);
  CHECK(removed == std::vector<std::string>{"job-2-1"});
  CHECK(job_dirs_to_remove({dir("job-1-1", 50 * kHourMs, 5000, true)}, kLimits, kNow).empty());
}

}  // namespace kiln::agent
