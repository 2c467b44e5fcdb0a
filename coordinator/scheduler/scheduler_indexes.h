// The scheduler's indexes of its leases and requests: each is kept with every change of what it
// counts and can say whether it holds what a scan of the records gives (matches_scan, for
// Scheduler::check_invariants). Internal to the scheduler core (scheduler_impl.h).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "coordinator/scheduler/scheduler_records.h"

namespace kiln::scheduler {

// Each lease by its next deadline: the end of its grace if it was given notice, else its expiry
// (or its expiry, if that comes first). A lease is taken out before its deadline changes.
class LeaseDeadlines {
 public:
  static TimeMs deadline_of(const LeaseRec& l) { return std::min(l.grace_deadline_ms.value_or(kNever), l.expiry_ms); }
  void add(const LeaseRec& l) { by_deadline_.insert({deadline_of(l), l.id}); }
  void remove(const LeaseRec& l) { by_deadline_.erase({deadline_of(l), l.id}); }
  std::optional<TimeMs> next() const;
  // The leases whose deadline is `now` or earlier.
  std::vector<LeaseId> due_by(TimeMs now) const;
  bool matches_scan(const std::map<LeaseId, LeaseRec>& leases) const;

 private:
  std::set<std::pair<TimeMs, LeaseId>> by_deadline_;
};

// The chips leased per class and revision: what quotas are counted against.
class ChipsInUse {
 public:
  using Counts = std::map<std::pair<RequestClass, std::string>, int>;
  void add(const LeaseRec& l);
  void remove(const LeaseRec& l);
  const Counts& counts() const { return counts_; }
  bool matches_scan(const std::map<LeaseId, LeaseRec>& leases) const;

 private:
  Counts counts_;  // no zero counts
};

// The requests holding a claim, by when it lapses (Impl::lapse_at): a claim its request has not
// used lets its chips go then (schedule()).
class ClaimLapses {
 public:
  void add(TimeMs lapse_ms, RequestId request) { by_lapse_.insert({lapse_ms, request}); }
  void remove(TimeMs lapse_ms, RequestId request) { by_lapse_.erase({lapse_ms, request}); }
  bool empty() const { return by_lapse_.empty(); }
  std::optional<TimeMs> next() const;
  // The first request whose claim lapses by `now`, if any.
  std::optional<RequestId> first_lapsed(TimeMs now) const;
  bool matches_scan(const std::map<RequestId, RequestRec>& requests,
                    const std::function<TimeMs(const Claim&)>& lapse_at) const;

 private:
  std::set<std::pair<TimeMs, RequestId>> by_lapse_;
};

// How many requests' preempted_by name each request. One named by none finds the same victims as
// any other of its class and shape: a pass searches once for all of them (PlanningPass).
class PreemptorMentions {
 public:
  void add(RequestId preemptor) { ++count_[preemptor]; }
  // A request that named these is forgotten.
  void remove(const std::set<RequestId>& preemptors);
  bool named(RequestId request) const { return count_.count(request) != 0; }
  bool matches_scan(const std::map<RequestId, RequestRec>& requests) const;

 private:
  std::map<RequestId, int> count_;  // no zero counts
};

// What the filing of an experiment's lease without notice holds as of a moment, and until when.
struct NoticeFiled {
  TimeMs recheck = kFreeNow;     // kFreeNow: not filed for any moment yet
  std::optional<TimeMs> window;  // the moment from which a notice loses nothing, if later
  bool free = false;             // a notice now loses nothing
  bool operator==(const NoticeFiled&) const = default;
};

// The experiments' leases that have had no notice, the only ones a notice can go to, filed by
// whether a notice would lose nothing and from when on one would (Impl::free_notices). Both change
// only at a lease's checkpoints and at that moment itself, so each lease is filed again once the
// first of those passes (`recheck`) or when it acknowledges a checkpoint, and a pass reads the
// earliest entries instead of every lease.
class NoticeWindows {
 public:
  // Files the lease (again) as not yet placed: the next read of the filing places it.
  void file(LeaseId id);
  void unfile(LeaseId id);
  void place(LeaseId id, const NoticeFiled& entry);
  // The first lease whose entry is to be read again by `now`, if any.
  std::optional<LeaseId> first_to_recheck(TimeMs now) const;
  // Every entry whose recheck is later than `now` holds for it.
  void mark_filed_at(TimeMs now) { filed_at_ = now; }
  TimeMs filed_at() const { return filed_at_; }
  bool any_free() const { return free_ > 0; }
  std::optional<TimeMs> next_window() const;
  const std::map<LeaseId, NoticeFiled>& entries() const { return filed_; }
  // Whether exactly the leases `unnoticed` are filed, each entry not due to be read again holds
  // what `state_at` gives at the filing's moment, and the sets and count are made of the entries.
  Status check(const std::set<LeaseId>& unnoticed,
               const std::function<NoticeFiled(LeaseId, TimeMs)>& state_at) const;

 private:
  // Enters an entry in the sets and the count, or takes it out of them.
  void enter(LeaseId id, const NoticeFiled& entry);
  void leave(LeaseId id, const NoticeFiled& entry);

  std::map<LeaseId, NoticeFiled> filed_;
  std::set<std::pair<TimeMs, LeaseId>> rechecks_;
  std::set<std::pair<TimeMs, LeaseId>> windows_;
  std::size_t free_ = 0;
  TimeMs filed_at_ = kFreeNow;
};

}  // namespace kiln::scheduler
