// A node's diagnostics report and how people and machines read it: the agent writes it
// (kiln-agent diag, the kiln.diag job's result), and the kiln client shows a remote one the
// same way (kiln diag NODE).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/health/check_result.h"
#include "common/time.h"

namespace kiln::health {

struct DiagReport {
  int level = 1;
  std::string node;
  std::string revision;  // "" when no chip answered and no override is set
  std::vector<CheckResult> results;
  CheckStatus verdict = CheckStatus::skip;
  TimeMs started_at_ms = 0;  // wall clock, milliseconds since the epoch
  TimeMs finished_at_ms = 0;
};

// "2026-11-30T04:53:51.963Z" for milliseconds since the epoch, as reports show times.
std::string format_timestamp_utc(TimeMs at_ms);

// For people, like `dcgmi diag`: the verdict, the node-wide checks, a table of every per-chip
// check (a row) on every chip (a column), then each result that did not pass expanded with its
// reason and what to do, and the counts.
std::string format_diag_text(const DiagReport& report);
// The JSON report (docs/health.md): level, node, revision, verdict, summary, started_at,
// finished_at, duration_s, results.
std::string format_diag_json(const DiagReport& report);
// Reads what format_diag_json wrote.
Result<DiagReport> parse_diag_json(std::string_view json);

std::string check_result_to_json(const CheckResult& result);
Result<CheckResult> parse_check_result_json(std::string_view json);

}  // namespace kiln::health
