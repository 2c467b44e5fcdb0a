#include "coordinator/core/dev_leases.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/text/utf8.h"

namespace kiln::coordinator {

namespace {
// Lease events kept per lease for watchers that fall behind.
constexpr std::size_t kMaxLeaseEvents = 32;
}  // namespace

DevLease* DevLeases::find(std::uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

const DevLease* DevLeases::find(std::uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

std::vector<protocol::LeaseSummary> DevLeases::summaries() const {
  std::vector<protocol::LeaseSummary> out;
  for (const auto& [id, lease] : leases_) out.push_back(lease.summary);
  return out;
}

std::size_t DevLeases::active() const { return leases_.size() - ended_.size(); }

DevLease& DevLeases::add(DevLease lease) {
  const std::uint64_t id = lease.summary.lease_id;
  next_id_ = std::max(next_id_, id + 1);
  DevLease& added = leases_[id] = std::move(lease);
  index(added);
  return added;
}

void DevLeases::prune_ended() {
  while (ended_.size() > max_ended_kept_) {
    const std::uint64_t oldest = *ended_.begin();
    unindex(oldest);
    leases_.erase(oldest);
  }
}

DevLeases::Indexed DevLeases::indexed(const DevLease& lease) {
  using protocol::LeaseState;
  Indexed out;
  const LeaseState state = lease.summary.state;
  out.ended = state == LeaseState::ended;
  if (state == LeaseState::granted || state == LeaseState::preempting) {
    if (lease.summary.expires_at_ms > 0) out.due.push_back(static_cast<TimeMs>(lease.summary.expires_at_ms));
    if (state == LeaseState::preempting) out.due.push_back(static_cast<TimeMs>(lease.summary.grace_deadline_ms));
  }
  if (lease.recovered_under_notice && !out.ended) {
    out.recovered_grace = static_cast<TimeMs>(lease.summary.grace_deadline_ms);
  }
  return out;
}

void DevLeases::unindex(std::uint64_t lease_id) {
  auto it = indexed_.find(lease_id);
  if (it == indexed_.end()) return;
  ended_.erase(lease_id);
  for (TimeMs t : it->second.due) due_.erase({t, lease_id});
  if (it->second.recovered_grace) recovered_graces_.erase({*it->second.recovered_grace, lease_id});
  indexed_.erase(it);
}

void DevLeases::index(const DevLease& lease) {
  const std::uint64_t id = lease.summary.lease_id;
  unindex(id);
  Indexed entry = indexed(lease);
  if (entry.ended) ended_.insert(id);
  for (TimeMs t : entry.due) due_.insert({t, id});
  if (entry.recovered_grace) recovered_graces_.insert({*entry.recovered_grace, id});
  indexed_.emplace(id, std::move(entry));
}

std::vector<std::uint64_t> DevLeases::due(TimeMs now) const {
  std::set<std::uint64_t> ids;
  for (auto it = due_.begin(); it != due_.end() && it->first <= now; ++it) ids.insert(it->second);
  return {ids.begin(), ids.end()};
}

void DevLeases::set_recovered_under_notice(DevLease& lease, bool recovered) {
  lease.recovered_under_notice = recovered;
  index(lease);
}

std::optional<std::string> DevLeases::index_error() const {
  if (indexed_.size() != leases_.size()) {
    return fmt::format("{} leases, {} of them indexed", leases_.size(), indexed_.size());
  }
  std::size_t ended = 0;
  for (const auto& [id, lease] : leases_) {
    auto it = indexed_.find(id);
    if (it == indexed_.end() || !(it->second == indexed(lease))) {
      return fmt::format("lease L{} changed without being saved: its index entry is stale", id);
    }
    ended += it->second.ended ? 1 : 0;
  }
  if (ended != ended_.size()) return fmt::format("{} leases ended, the index counts {}", ended, ended_.size());
  return std::nullopt;
}

void DevLeases::save(const DevLease& lease) {
  index(lease);
  sink_.save(LeaseRecord{lease.summary, lease.requested_at_ms, lease.start_at_ms});
}

void DevLeases::record_event(DevLease& lease, protocol::LeaseEventKind kind, std::string message,
                             std::vector<std::uint64_t> job_ids) {
  lease.summary.job_ids = std::move(job_ids);
  lease.summary.detail = text::utf8_head(message, protocol::kMessageText.max_len);
  protocol::LeaseEvent event;
  event.seq = lease.summary.event_seq + 1;
  lease.summary.event_seq = event.seq;
  event.kind = kind;
  event.message = lease.summary.detail;
  event.lease = lease.summary;
  lease.events.push_back(event);
  while (lease.events.size() > kMaxLeaseEvents) lease.events.pop_front();
  save(lease);
  sink_.log(action::Severity::info,
            fmt::format("lease L{} ({}): {}", lease.summary.lease_id, lease.summary.owner, message));
  std::vector<LeaseWatch> keep;
  for (LeaseWatch& w : watches_) {
    if (w.lease_id == lease.summary.lease_id && w.after_seq < event.seq) {
      sink_.to_client(w.client, event, w.corr);
    } else {
      keep.push_back(std::move(w));
    }
  }
  watches_ = std::move(keep);
}

bool DevLeases::park(LeaseWatch watch) {
  if (watches_.size() >= max_watches_) return false;
  watches_.push_back(std::move(watch));
  return true;
}

std::vector<LeaseWatch> DevLeases::take_due_watches(TimeMs now) {
  std::vector<LeaseWatch> due;
  std::vector<LeaseWatch> keep;
  for (LeaseWatch& w : watches_) {
    if (!leases_.count(w.lease_id)) continue;
    (now >= w.deadline_ms ? due : keep).push_back(std::move(w));
  }
  watches_ = std::move(keep);
  return due;
}

std::optional<TimeMs> DevLeases::next_deadline() const {
  std::optional<TimeMs> next;
  auto consider = [&](TimeMs t) {
    if (!next || t < *next) next = t;
  };
  for (const LeaseWatch& w : watches_) consider(w.deadline_ms);
  if (!recovered_graces_.empty()) consider(recovered_graces_.begin()->first);
  return next;
}

}  // namespace kiln::coordinator
