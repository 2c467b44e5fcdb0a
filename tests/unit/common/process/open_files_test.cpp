// The limit on open files a server raises for its connections.
#include <sys/resource.h>

#include <doctest/doctest.h>

#include "common/process/open_files.h"

TEST_CASE("the soft limit on open files is raised to the hard one, which a service's manager leaves to take") {
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max <= 64) {
    MESSAGE("kiln test skipped: the hard limit on open files is " << saved.rlim_max << ", nothing to raise to");
    return;
  }
  rlimit low = saved;
  low.rlim_cur = 64;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);

  const auto raised = kiln::raise_open_files_limit();
  rlimit now{};
  ::getrlimit(RLIMIT_NOFILE, &now);
  // At its hard limit already, nothing changes.
  const auto again = kiln::raise_open_files_limit();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  REQUIRE(raised.has_value());
  CHECK(raised->before == 64);
  CHECK(raised->now == raised->hard);
  CHECK(raised->now > 64);
  CHECK(now.rlim_cur == raised->now);
  // The hard limit stays where it was: lowering it could not be undone.
  CHECK(now.rlim_max == saved.rlim_max);
  if (saved.rlim_max != RLIM_INFINITY) CHECK(raised->hard == saved.rlim_max);
  REQUIRE(again.has_value());
  CHECK(again->before == raised->now);
  CHECK(again->now == raised->now);
}
