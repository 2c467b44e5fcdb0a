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

std::size_t DevLeases::active() const {
  std::size_t active = 0;
  for (const auto& [id, lease] : leases_) active += lease.summary.state == protocol::LeaseState::ended ? 0 : 1;
  return active;
}

DevLease& DevLeases::add(DevLease lease) {
  const std::uint64_t id = lease.summary.lease_id;
  next_id_ = std::max(next_id_, id + 1);
  return leases_[id] = std::move(lease);
}

void DevLeases::prune_ended() {
  std::size_t ended = leases_.size() - active();
  for (auto it = leases_.begin(); it != leases_.end() && ended > max_ended_kept_;) {
    if (it->second.summary.state == protocol::LeaseState::ended) {
      it = leases_.erase(it);
      --ended;
    } else {
      ++it;
    }
  }
}

void DevLeases::save(const DevLease& lease) {
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
  for (const auto& [id, lease] : leases_) {
    if (lease.recovered_under_notice) consider(static_cast<TimeMs>(lease.summary.grace_deadline_ms));
  }
  return next;
}

}  // namespace kiln::coordinator
