// A qualification run as it is asked of the qualifier (kiln smoke, nightly, qualify-release
// write one; docs/protocol.md, run_request records), and the claim a qualifier holds on a run
// while it drives it (run_claim records). Pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/time.h"
#include "common/stats/perf_gate.h"
#include "records/tier.h"

namespace kiln::qualification {

struct RunRequest {
  std::string run_id;
  Tier tier = Tier::nightly;
  std::string bundle_id;  // the candidate's full id
  std::string change;     // smoke: the change under test (empty: the bundle's last)
  std::uint32_t repeats = 10;
  std::uint32_t max_jobs = 32;
  std::uint32_t max_models = 0;   // 0: all the tier selects
  std::uint32_t soak_rounds = 2;  // release only
  bool accept = true;             // nightly and release: a passing bundle becomes the baseline
  TimeMs deadline_ms = 0;  // a scheduled nightly: finished by then (wall clock), or late; 0: none
  // The performance gate's rule; absent: the tier's (perf_rule_for).
  std::optional<stats::GateRule> perf_rule;
};

// A nightly decides with the sequential rule (repeats from each model's measured noise), a smoke
// and a release with the fixed one, unless the request names one.
stats::GateRule perf_rule_for(const RunRequest& request);

nlohmann::json to_json(const RunRequest& request);
// Every field checked: a missing or out-of-range one is Errc::invalid_argument naming it.
Result<RunRequest> run_request_from_json(const nlohmann::json& json);

// What a qualifier sends to claim a run (or renew its claim): the coordinator stores it with
// expires_at_ms = its own clock + lease_ms, and refuses another owner's claim until then.
struct RunClaim {
  std::string run_id;
  std::string owner;  // the qualifier's name and process id (`name/pid`)
  DurationMs lease_ms = 0;
  TimeMs expires_at_ms = 0;  // set by the coordinator
};

constexpr DurationMs kMinClaimMs = 1000;
constexpr DurationMs kMaxClaimMs = 3600000;

nlohmann::json to_json(const RunClaim& claim);
Result<RunClaim> run_claim_from_json(const nlohmann::json& json);

}  // namespace kiln::qualification
