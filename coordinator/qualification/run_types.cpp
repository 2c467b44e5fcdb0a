#include "coordinator/qualification/run_types.h"

namespace kiln::qualification {

std::string_view to_string(Tier tier) {
  switch (tier) {
    case Tier::smoke: return "smoke";
    case Tier::nightly: return "nightly";
    case Tier::release: return "release";
  }
  return "unknown";
}

std::optional<Tier> tier_from_string(std::string_view name) {
  for (Tier tier : {Tier::smoke, Tier::nightly, Tier::release}) {
    if (to_string(tier) == name) return tier;
  }
  return std::nullopt;
}

std::string_view to_string(JobPurpose purpose) {
  switch (purpose) {
    case JobPurpose::measure: return "measure";
    case JobPurpose::extra_repeats: return "extra_repeats";
    case JobPurpose::confirmation: return "confirmation";
    case JobPurpose::triage_rerun: return "triage_rerun";
    case JobPurpose::origin_rerun: return "origin_rerun";
    case JobPurpose::bisect_probe: return "bisect_probe";
  }
  return "unknown";
}

std::string_view to_string(ModelVerdict verdict) {
  switch (verdict) {
    case ModelVerdict::pending: return "pending";
    case ModelVerdict::passed: return "passed";
    case ModelVerdict::improved: return "improved";
    case ModelVerdict::performance_regression: return "performance_regression";
    case ModelVerdict::correctness_regression: return "correctness_regression";
    case ModelVerdict::hardware_suspect: return "hardware_suspect";
    case ModelVerdict::flaky: return "flaky";
    case ModelVerdict::inconclusive: return "inconclusive";
    case ModelVerdict::skipped: return "skipped";
    case ModelVerdict::error: return "error";
  }
  return "unknown";
}

bool fails_run(ModelVerdict verdict) {
  switch (verdict) {
    case ModelVerdict::pending:
    case ModelVerdict::passed:
    case ModelVerdict::improved:
    case ModelVerdict::flaky:
    case ModelVerdict::inconclusive:
    case ModelVerdict::skipped: return false;
    default: return true;
  }
}
}  // namespace kiln::qualification
