#include "coordinator/scheduler/scheduler_indexes.h"

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

}  // namespace kiln::scheduler
