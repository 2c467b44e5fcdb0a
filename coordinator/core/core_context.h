// What every room of the coordinator core shares (coordinator_core.h says which rooms there are):
// the knobs, the one queue of actions, the core's clock, the node registry and the scheduler
// bridge. Each room keeps a copy of the context; the references point into CoordinatorCore.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/core/knobs.h"
#include "coordinator/core/node_registry.h"
#include "coordinator/core/records.h"
#include "coordinator/core/scheduler_bridge.h"

namespace kiln::coordinator {

// The two clocks the core is given at every input. Deadlines (liveness, job timeouts, lease
// expiry, preemption grace) run on the monotonic clock, so a step of the system clock neither
// loses every node nor expires every lease; the wall clock is for display and for the times
// people set (a lease booked to start at 14:00).
struct Now {
  TimeMs monotonic_ms = 0;
  TimeMs wall_ms = 0;
  constexpr Now(TimeMs monotonic, TimeMs wall) : monotonic_ms(monotonic), wall_ms(wall) {}
  // One clock for both, as in simulations and tests, where time never steps.
  constexpr Now(TimeMs both) : monotonic_ms(both), wall_ms(both) {}  // NOLINT(google-explicit-constructor)
};

// The core's clock: the wall clock at start-up, advanced by the monotonic clock. Every time the
// core keeps or stores is on it; it reads as the wall clock until the system clock steps.
class CoreClock {
 public:
  explicit CoreClock(Now start)
      : mono_origin_ms_(start.monotonic_ms), core_origin_ms_(start.wall_ms), latest_wall_ms_(start.wall_ms) {}

  // The core's time at `now`; remembers how far the wall clock is from it.
  TimeMs advance(const Now& now) {
    const TimeMs core_ms = core_origin_ms_ + (now.monotonic_ms - mono_origin_ms_);
    wall_offset_ms_ = now.wall_ms - core_ms;
    latest_wall_ms_ = now.wall_ms;
    return core_ms;
  }
  // The wall clock at the latest input: when the audit log says something happened.
  TimeMs latest_wall_ms() const { return latest_wall_ms_; }
  // The wall clock minus the core's, at the latest input.
  TimeMs wall_offset_ms() const { return wall_offset_ms_; }
  // A time on the core's clock as the shell's monotonic clock reads it (the shell waits on it).
  TimeMs to_monotonic(TimeMs core_ms) const { return core_ms + mono_origin_ms_ - core_origin_ms_; }
  // "HH:MM UTC" of a time on the core's clock, as the wall clock reads it now (with seconds:
  // "HH:MM:SS UTC").
  std::string text(TimeMs core_ms, bool with_seconds = false) const;

 private:
  TimeMs mono_origin_ms_ = 0;  // the monotonic clock at start-up
  TimeMs core_origin_ms_ = 0;  // the wall clock at start-up: where the core's clock starts
  TimeMs wall_offset_ms_ = 0;
  TimeMs latest_wall_ms_ = 0;
};

struct CoreContext {
  const CoordinatorKnobs& knobs;
  ActionSink& sink;  // every room puts its actions here, in order
  const CoreClock& clock;
  NodeRegistry& registry;
  SchedulerBridge& bridge;

  scheduler::Scheduler& scheduler() const { return bridge.scheduler(); }
  TimeMs to_scheduler_time(TimeMs core_ms) const { return bridge.to_scheduler_time(core_ms); }
  TimeMs from_scheduler_time(TimeMs scheduled_ms) const { return bridge.to_core_time(scheduled_ms); }
  std::optional<std::string> peer_of(const std::string& node_id) const { return registry.peer_of(node_id); }

  void to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr = 0) const {
    sink.to_agent(peer, std::move(body), corr);
  }
  void reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message) const {
    sink.reply_error(client, corr, code, std::move(message));
  }
  void log(action::Severity severity, std::string text) const { sink.log(severity, std::move(text)); }
  // Every change of a node's record, and of a maintenance job (which drains its node), is saved:
  // saving is also what tells the scheduler bridge the node may take other work now.
  void save(const JobRecord& job) const {
    if (protocol::is_maintenance_workload(job.summary.workload)) bridge.node_changed(job.requested_node_id);
    sink.save(job);
  }
  void save(const NodeRecord& node) const {
    bridge.node_changed(node.summary.node_id);
    sink.save(node);
  }
  // A line of the audit log, now (docs/protocol.md §16): what a caller did.
  void audit(const Caller& actor, std::string action, std::string subject, std::string detail) const {
    sink.audit(clock.latest_wall_ms(), actor.key_name, std::string(protocol::enum_name(actor.role)),
               std::move(action), std::move(subject), std::move(detail));
  }
  // A line for the coordinator's own decision.
  void audit(std::string action, std::string subject, std::string detail) const {
    sink.audit(clock.latest_wall_ms(), "coordinator", "coordinator", std::move(action), std::move(subject),
               std::move(detail));
  }
};

}  // namespace kiln::coordinator
