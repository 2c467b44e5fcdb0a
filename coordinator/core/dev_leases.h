// Developers' leases (kiln lease): chips held without a workload until released, expired or
// revoked. Keeps each lease with its recent events, and the watches parked until a lease's next
// event; numbers, saves and logs every event and answers the watches behind it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/messages.h"
#include "common/time.h"
#include "coordinator/core/actions.h"
#include "coordinator/scheduler/types.h"

namespace kiln::coordinator {

struct DevLease {
  protocol::LeaseSummary summary;
  std::optional<scheduler::LeaseId> scheduler_lease;
  std::deque<protocol::LeaseEvent> events;  // the most recent ones, for watchers
  TimeMs requested_at_ms = 0;               // its age in the queue, kept when requeued
  std::uint64_t start_at_ms = 0;            // a window booked ahead: not granted before
  // Under notice when the coordinator restarted: the core revokes it at its grace deadline,
  // as the scheduler (which no longer knows of the notice) would have.
  bool recovered_under_notice = false;
};

// A parked watch_lease: answered at the lease's next event or at `deadline_ms`.
struct LeaseWatch {
  std::string client;
  std::uint64_t corr = 0;
  std::uint64_t lease_id = 0;
  std::uint64_t after_seq = 0;
  TimeMs deadline_ms = 0;
};

class DevLeases {
 public:
  DevLeases(ActionSink& sink, std::size_t max_ended_kept, std::size_t max_watches)
      : sink_(sink), max_ended_kept_(max_ended_kept), max_watches_(max_watches) {}

  std::map<std::uint64_t, DevLease>& all() { return leases_; }
  const std::map<std::uint64_t, DevLease>& all() const { return leases_; }
  DevLease* find(std::uint64_t lease_id);
  const DevLease* find(std::uint64_t lease_id) const;
  std::vector<protocol::LeaseSummary> summaries() const;
  // Pending, granted or under notice.
  std::size_t active() const;

  // The id the next new lease gets.
  std::uint64_t next_id() const { return next_id_; }
  // A new or recovered lease, under its summary's id.
  DevLease& add(DevLease lease);
  // Ended leases beyond the number kept for `kiln leases --all` are forgotten, oldest first.
  void prune_ended();

  void save(const DevLease& lease);
  // Records an event of the lease: numbered from its summary (which the store keeps, so a
  // watcher's after_seq stays meaningful across a restart), kept for watchers, saved, logged,
  // and sent to every parked watch it is news to.
  void record_event(DevLease& lease, protocol::LeaseEventKind kind, std::string message,
                    std::vector<std::uint64_t> job_ids);

  // Parks a watch until the lease's next event; false when too many are parked already.
  bool park(LeaseWatch watch);
  // The parked watches whose deadline has come, taken out (those of leases forgotten meanwhile
  // are dropped: the watcher asks again and learns the lease is gone).
  std::vector<LeaseWatch> take_due_watches(TimeMs now);
  // The earliest watch deadline or revocation of a lease recovered under notice (not ended).
  std::optional<TimeMs> next_deadline() const;
  // Leases granted or under notice whose expiry or grace deadline is at or before `now`, in id
  // order: the only ones LeaseLifecycle::end_if_due has anything to do for.
  std::vector<std::uint64_t> due(TimeMs now) const;
  // Sets whether the lease is under a notice from before a restart, which the core (not the
  // scheduler) revokes at its grace deadline.
  void set_recovered_under_notice(DevLease& lease, bool recovered);
  // What the indexes below get wrong against a reading of every lease, if anything (the
  // cluster simulation checks it after every step).
  std::optional<std::string> index_error() const;

 private:
  ActionSink& sink_;
  std::size_t max_ended_kept_ = 0;
  std::size_t max_watches_ = 0;
  // What a lease contributes to the indexes, as of its last add or save.
  struct Indexed {
    bool ended = false;
    std::vector<TimeMs> due;                // expiry, grace deadline
    std::optional<TimeMs> recovered_grace;  // recovered under notice, not ended
    bool operator==(const Indexed&) const = default;
  };
  static Indexed indexed(const DevLease& lease);
  // Kept with every add and save, so that no message or turn of the loop reads every lease.
  void index(const DevLease& lease);
  void unindex(std::uint64_t lease_id);

  std::map<std::uint64_t, DevLease> leases_;
  std::uint64_t next_id_ = 1;
  std::vector<LeaseWatch> watches_;
  std::map<std::uint64_t, Indexed> indexed_;
  std::set<std::uint64_t> ended_;
  std::set<std::pair<TimeMs, std::uint64_t>> due_;
  std::set<std::pair<TimeMs, std::uint64_t>> recovered_graces_;
};

}  // namespace kiln::coordinator
