#include "coordinator/scheduler/scheduler_indexes.h"

#include <fmt/format.h>

namespace kiln::scheduler {

std::optional<TimeMs> LeaseDeadlines::next() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

std::vector<LeaseId> LeaseDeadlines::due_by(TimeMs now) const {
  std::vector<LeaseId> out;
  for (auto it = by_deadline_.begin(); it != by_deadline_.end() && it->first <= now; ++it) out.push_back(it->second);
  return out;
}

bool LeaseDeadlines::matches_scan(const std::map<LeaseId, LeaseRec>& leases) const {
  LeaseDeadlines scanned;
  for (const auto& [id, l] : leases) scanned.add(l);
  return scanned.by_deadline_ == by_deadline_;
}

void ChipsInUse::add(const LeaseRec& l) { counts_[{l.cls, l.revision}] += static_cast<int>(l.chips.size()); }

void ChipsInUse::remove(const LeaseRec& l) {
  auto used = counts_.find({l.cls, l.revision});
  KILN_ASSERT(used != counts_.end(), "a lease's chips are counted in use");
  used->second -= static_cast<int>(l.chips.size());
  if (used->second == 0) counts_.erase(used);
}

bool ChipsInUse::matches_scan(const std::map<LeaseId, LeaseRec>& leases) const {
  ChipsInUse scanned;
  for (const auto& [id, l] : leases) scanned.add(l);
  return scanned.counts_ == counts_;
}

std::optional<TimeMs> ClaimLapses::next() const {
  if (by_lapse_.empty()) return std::nullopt;
  return by_lapse_.begin()->first;
}

std::optional<RequestId> ClaimLapses::first_lapsed(TimeMs now) const {
  if (by_lapse_.empty() || by_lapse_.begin()->first > now) return std::nullopt;
  return by_lapse_.begin()->second;
}

bool ClaimLapses::matches_scan(const std::map<RequestId, RequestRec>& requests,
                               const std::function<TimeMs(const Claim&)>& lapse_at) const {
  ClaimLapses scanned;
  for (const auto& [id, r] : requests) {
    if (r.claim) scanned.add(lapse_at(*r.claim), id);
  }
  return scanned.by_lapse_ == by_lapse_;
}

void PreemptorMentions::remove(const std::set<RequestId>& preemptors) {
  for (RequestId preemptor : preemptors) {
    auto mentions = count_.find(preemptor);
    KILN_ASSERT(mentions != count_.end(), "a request's preemptors are counted");
    if (--mentions->second == 0) count_.erase(mentions);
  }
}

bool PreemptorMentions::matches_scan(const std::map<RequestId, RequestRec>& requests) const {
  PreemptorMentions scanned;
  for (const auto& [id, r] : requests) {
    for (RequestId preemptor : r.preempted_by) scanned.add(preemptor);
  }
  return scanned.count_ == count_;
}

void NoticeWindows::enter(LeaseId id, const NoticeFiled& entry) {
  rechecks_.insert({entry.recheck, id});
  if (entry.window) windows_.insert({*entry.window, id});
  if (entry.free) ++free_;
}

void NoticeWindows::leave(LeaseId id, const NoticeFiled& entry) {
  rechecks_.erase({entry.recheck, id});
  if (entry.window) windows_.erase({*entry.window, id});
  if (entry.free) --free_;
}

void NoticeWindows::file(LeaseId id) {
  unfile(id);
  enter(id, filed_.emplace(id, NoticeFiled{}).first->second);
}

void NoticeWindows::unfile(LeaseId id) {
  auto it = filed_.find(id);
  if (it == filed_.end()) return;
  leave(id, it->second);
  filed_.erase(it);
}

void NoticeWindows::place(LeaseId id, const NoticeFiled& entry) {
  NoticeFiled& filed = filed_.at(id);
  leave(id, filed);
  filed = entry;
  enter(id, filed);
}

std::optional<LeaseId> NoticeWindows::first_to_recheck(TimeMs now) const {
  if (rechecks_.empty() || rechecks_.begin()->first > now) return std::nullopt;
  return rechecks_.begin()->second;
}

std::optional<TimeMs> NoticeWindows::next_window() const {
  if (windows_.empty()) return std::nullopt;
  return windows_.begin()->first;
}

Status NoticeWindows::check(const std::set<LeaseId>& unnoticed,
                            const std::function<NoticeFiled(LeaseId, TimeMs)>& state_at) const {
  NoticeWindows entered;
  for (const auto& [id, entry] : filed_) {
    if (!unnoticed.count(id)) {
      return fail(Errc::internal, fmt::format("lease {} is filed as an experiment without notice and is not one", id));
    }
    if (entry.recheck > filed_at_ && state_at(id, filed_at_) != entry) {
      return fail(Errc::internal, fmt::format("lease {}'s notice window disagrees with its checkpoints", id));
    }
    entered.enter(id, entry);
  }
  if (filed_.size() != unnoticed.size()) {
    return fail(Errc::internal, "the experiments filed as without notice disagree with the leases");
  }
  if (entered.rechecks_ != rechecks_ || entered.windows_ != windows_ || entered.free_ != free_) {
    return fail(Errc::internal, "the experiments' notice windows disagree with their entries");
  }
  return {};
}

}  // namespace kiln::scheduler
