// A qualification run's verdict, the one word every reader of its report shows: the waiting
// client's exit code, `kiln runs`, the qualifier's /metrics and the report pages. A run that could
// not be carried out is an `error`, never a regression (`failed`). Pure: report JSON in.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace kiln::qualification {

// "running" (not finished), "passed", "failed" (a model's regression failed it, or the unit tier
// refused its change) or "error" (it could not be carried out: refused when it was taken up,
// cancelled, or none of its failing models could be measured), and why, in one line.
struct RunVerdict {
  std::string word;
  std::string reason;
};

// From a report as recorded (kiln.qualification-run/1, old reports included).
RunVerdict run_verdict(const nlohmann::json& report);

// Ends a run that cannot be carried out with the error verdict: `report` (as last recorded, or one
// with no model yet) finished at `now_ms`, every model run without a verdict an error saying
// `why`, with `reason` and `could_not_run`, and `cancelled_by` when someone cancelled it (kiln run
// cancel); its summary says ERROR and why.
void end_with_error(nlohmann::json& report, const std::string& why, const std::string& cancelled_by,
                    std::int64_t now_ms);

}  // namespace kiln::qualification
