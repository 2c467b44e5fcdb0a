// JUnit XML for CI, the one writer of every tier's report (run_report.h, unit_tier.h): suites of
// test cases, each passed, failed, errored (could not be measured) or skipped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/time.h"

namespace kiln::qualification {

struct JunitCase {
  enum class Outcome { passed, failed, error, skipped };
  std::string name;
  std::string classname;
  DurationMs duration_ms = 0;
  Outcome outcome = Outcome::passed;
  std::string message;     // failed, error, skipped: the element's message
  std::string type;        // failed: the failure's type
  std::string system_out;  // "" for none
};

struct JunitSuite {
  std::string name;
  std::vector<JunitCase> cases;
};

// <testsuites name=...> with the counts and times of its suites added up.
std::string junit_xml(std::string_view name, const std::vector<JunitSuite>& suites);

}  // namespace kiln::qualification
