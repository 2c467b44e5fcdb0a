// Rules and wording shared by the rooms of the coordinator core (coordinator_core.cpp,
// agent_messages.cpp, job_table*.cpp, lease_lifecycle.cpp, scheduler_decisions.cpp,
// queue_listing.cpp, scheduler_bridge.cpp). Internal: only those files include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "common/protocol/roles.h"
#include "common/time.h"
#include "coordinator/scheduler/types.h"

namespace kiln::coordinator::detail {

using protocol::JobState;
using protocol::LeaseEventKind;
using protocol::LeaseState;
using protocol::NodeState;
using protocol::PriorityClass;
using protocol::Role;

constexpr TimeMs kDayMs = 24 * kHourMs;

inline bool client_role_may_submit(Role role, PriorityClass cls) { return protocol::role_may_submit(role, cls); }

inline bool client_role_may_run_maintenance(Role role, std::string_view workload) {
  if (role == Role::admin || role == Role::ops) return true;
  return role == Role::lab && workload == protocol::kDiagWorkload;
}

inline bool privileged(Role role) { return role == Role::ops || role == Role::admin; }

inline scheduler::RequestClass to_request_class(PriorityClass cls) {
  auto parsed = scheduler::parse_request_class(protocol::enum_name(cls));
  KILN_ASSERT(parsed.has_value(), "protocol and scheduler name the same classes");
  return *parsed;
}

// The scheduler leases 1, 2, 4 or 8 chips on one node; a job asking for 3 gets a lease of 4
// and uses 3 of them.
inline std::uint32_t lease_chips_for(std::uint32_t chips) {
  std::uint32_t size = 1;
  while (size < chips) size *= 2;
  return size;
}

using scheduler::human_duration;

// "HH:MM UTC" of a wall-clock time (milliseconds since the epoch); "HH:MM:SS UTC" with seconds,
// for a deadline that is seconds away.
inline std::string wall_clock_text(TimeMs wall, bool with_seconds = false) {
  TimeMs in_day = ((wall % kDayMs) + kDayMs) % kDayMs;
  if (with_seconds) {
    return fmt::format("{:02}:{:02}:{:02} UTC", in_day / kHourMs, (in_day % kHourMs) / kMinuteMs,
                       (in_day % kMinuteMs) / kSecondMs);
  }
  return fmt::format("{:02}:{:02} UTC", in_day / kHourMs, (in_day % kHourMs) / kMinuteMs);
}

}  // namespace kiln::coordinator::detail
