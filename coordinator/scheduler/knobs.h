// Every interval and limit of the scheduler in one struct, with defaults, loadable from the
// `[scheduler]` table of coordinator.toml. toml++ stays in knobs.cpp; code that already holds a
// parsed toml::table includes coordinator/scheduler/knobs_toml.h instead.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"
#include "coordinator/scheduler/types.h"

namespace kiln::scheduler {

// kiln: priorities, quotas with borrowing, reservations with backfill, preemption with notice.
// The other two are the baselines the fleet simulator compares against, run by the same core:
// fifo: one queue in arrival order, the head blocks everything behind it, no preemption.
// strict_priority: class then age, whatever fits starts, no reservations, quotas or preemption.
enum class Policy { kiln, fifo, strict_priority };
constexpr EnumTable<Policy, 3> enum_names(Policy) {
  return {{
      {Policy::kiln, "kiln"},
      {Policy::fifo, "fifo"},
      {Policy::strict_priority, "strict_priority"},
  }};
}
inline std::string_view to_string(Policy value) { return enum_name(value); }
inline std::optional<Policy> parse_policy(std::string_view name) { return enum_from_name<Policy>(name); }

struct SchedulerKnobs {
  Policy policy = Policy::kiln;
  DurationMs grace_ms = 5 * kMinuteMs;  // notice before a preempted lease is revoked
  double lease_slack = 1.5;             // lease expiry = expected duration x slack
  DurationMs max_lease_ms = 7 * 24 * kHourMs;
  // How long each class may wait before it preempts experiments; nullopt: never preempts.
  std::array<std::optional<DurationMs>, kClassCount> target_start_latency_ms = {
      DurationMs{0},              // release: at its start time
      DurationMs{15 * kMinuteMs}, // presubmit: with 8-minute smoke runs, signal within ~20 min
      DurationMs{30 * kMinuteMs}, // bisect
      DurationMs{0},              // nightly: at once, with the notice (its triage must not wait on a week's lease)
      std::nullopt};              // experiment: never preempts
  // A class over its quota may still use idle chips (borrow) when allowed; borrowed leases are
  // the first reclaimed.
  std::array<bool, kClassCount> may_borrow = {true, true, true, true, true};
  // Chips a class may hold per revision; absent = unlimited.
  std::map<std::pair<RequestClass, std::string>, int> quota_chips;
  // Blocked requests (in scheduling order) that hold reservations; later ones only backfill.
  // Windows booked ahead (not_before) always hold theirs.
  std::size_t max_reservations = 8;
  std::size_t max_pending_requests = 10000;
  std::size_t max_nodes = 16384;  // 10,000 agents and room to grow
  // Reads every pending request and every node at every step, with none of the shortcuts the
  // indexes allow: the reference the tests and kiln-bench-scheduler hold the shortcuts to. Not
  // read from coordinator.toml.
  bool exhaustive_passes = false;

  std::optional<int> quota(RequestClass cls, const std::string& revision) const;
};

// Reads the `[scheduler]` table of a TOML document (absent: defaults). Unknown keys are errors.
//   [scheduler]
//   policy = "kiln"                      # kiln | fifo | strict_priority
//   grace_ms = 300000
//   lease_slack = 1.5
//   max_lease_ms = 604800000
//   max_pending_requests = 10000
//   max_reservations = 8
//   [scheduler.target_start_latency_ms]  # per class; -1 = never preempts
//   presubmit = 300000
//   [scheduler.may_borrow]
//   experiment = true
//   [scheduler.quota_chips.experiment]   # per class, per revision
//   a = 56
Result<SchedulerKnobs> parse_scheduler_knobs_toml(std::string_view toml_text);
Result<SchedulerKnobs> load_scheduler_knobs(const std::string& path);

}  // namespace kiln::scheduler
