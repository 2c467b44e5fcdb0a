#include "coordinator/core/scheduler_bridge.h"

#include <fmt/format.h>

#include "common/exhaustive.h"
#include "coordinator/core/core_rules.h"

namespace kiln::coordinator {

std::string describe(const RequestOwner& owner) {
  return std::visit(Exhaustive{
                        [](const request_owner::Job& o) { return fmt::format("job {}", o.job_id); },
                        [](const request_owner::DevLease& o) { return fmt::format("lease L{}", o.lease_id); },
                        [](const request_owner::StopHold& o) {
                          return fmt::format("the stopping attempt of job {} on {}", o.job_id, o.node_id);
                        },
                    },
                    owner);
}

SchedulerBridge::SchedulerBridge(const scheduler::SchedulerKnobs& knobs, TimeMs now, ActionSink& sink)
    : sink_(sink), scheduler_(knobs), clock_origin_ms_(now >= 0 ? now / detail::kDayMs * detail::kDayMs : 0) {}

scheduler::RequestId SchedulerBridge::request_of(const request_owner::Job& job) {
  auto [it, added] = job_requests_.try_emplace(job.job_id, next_request_);
  if (added) owners_.emplace(next_request_++, job);
  return it->second;
}

scheduler::RequestId SchedulerBridge::request_of(const request_owner::DevLease& lease) {
  auto [it, added] = lease_requests_.try_emplace(lease.lease_id, next_request_);
  if (added) owners_.emplace(next_request_++, lease);
  return it->second;
}

std::optional<scheduler::RequestId> SchedulerBridge::find_request(const request_owner::Job& job) const {
  auto it = job_requests_.find(job.job_id);
  if (it == job_requests_.end()) return std::nullopt;
  return it->second;
}

std::optional<scheduler::RequestId> SchedulerBridge::find_request(const request_owner::DevLease& lease) const {
  auto it = lease_requests_.find(lease.lease_id);
  if (it == lease_requests_.end()) return std::nullopt;
  return it->second;
}

std::optional<RequestOwner> SchedulerBridge::owner_of(scheduler::RequestId request) const {
  auto it = owners_.find(request);
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

scheduler::RequestId SchedulerBridge::new_stop_hold(std::uint64_t job_id, const std::string& node_id) {
  const scheduler::RequestId id = next_request_++;
  request_owner::StopHold hold{job_id, node_id};
  owners_.emplace(id, hold);
  stop_holds_by_node_.emplace(node_id, id, job_id);
  stop_holds_.emplace(id, std::move(hold));
  return id;
}

void SchedulerBridge::forget_stop_hold(scheduler::RequestId request) {
  auto it = stop_holds_.find(request);
  if (it == stop_holds_.end()) return;
  stop_holds_by_node_.erase({it->second.node_id, request, it->second.job_id});
  stop_holds_.erase(it);
}

// A node holds a few chips at most, so a node's holds are read whole.
std::optional<scheduler::RequestId> SchedulerBridge::stop_hold_of(std::uint64_t job_id,
                                                                  const std::string& node_id) const {
  for (auto it = stop_holds_by_node_.lower_bound({node_id, 0, 0});
       it != stop_holds_by_node_.end() && std::get<0>(*it) == node_id; ++it) {
    if (std::get<2>(*it) == job_id) return std::get<1>(*it);
  }
  return std::nullopt;
}

std::vector<std::uint64_t> SchedulerBridge::stop_held_jobs_on(const std::string& node_id) const {
  std::vector<std::uint64_t> jobs;
  for (auto it = stop_holds_by_node_.lower_bound({node_id, 0, 0});
       it != stop_holds_by_node_.end() && std::get<0>(*it) == node_id; ++it) {
    jobs.push_back(std::get<2>(*it));
  }
  return jobs;
}

std::optional<std::string> SchedulerBridge::stop_hold_index_error() const {
  std::set<std::tuple<std::string, scheduler::RequestId, std::uint64_t>> expected;
  for (const auto& [request, hold] : stop_holds_) expected.emplace(hold.node_id, request, hold.job_id);
  if (expected == stop_holds_by_node_) return std::nullopt;
  return fmt::format("{} stop holds, {} in the index by node, or filed under the wrong node or job",
                     stop_holds_.size(), stop_holds_by_node_.size());
}

void SchedulerBridge::end_stop_hold(scheduler::RequestId request, TimeMs now) {
  forget_stop_hold(request);
  if (scheduler_.lease_of(request) || scheduler_.is_pending(request)) {
    (void)scheduler_.cancel(request, to_scheduler_time(now));
  }
}

bool SchedulerBridge::is_stop_hold(scheduler::RequestId request) const {
  auto it = owners_.find(request);
  return it != owners_.end() && std::holds_alternative<request_owner::StopHold>(it->second);
}

std::optional<SchedulerDecision> SchedulerBridge::poll_decision() {
  while (auto a = scheduler_.poll_action()) {
    const scheduler::RequestId request = std::visit([](const auto& act) { return act.request; }, *a);
    auto owner = owners_.find(request);
    KILN_ASSERT(owner != owners_.end(), "the scheduler decides only about requests the bridge gave out");
    if (std::holds_alternative<request_owner::StopHold>(owner->second)) {
      if (!std::holds_alternative<scheduler::LeaseGranted>(*a) && !std::holds_alternative<scheduler::PreemptNotice>(*a)) {
        forget_stop_hold(request);
      }
      continue;
    }
    return SchedulerDecision{std::move(*a), owner->second};
  }
  return std::nullopt;
}

void SchedulerBridge::set_node_state(const std::string& node_id, scheduler::NodeState state, std::string reason,
                                     std::string owner, TimeMs now) {
  auto known = node_states_.find(node_id);
  if (known != node_states_.end() && known->second == state) return;
  if (auto s = scheduler_.set_node_state(node_id, state, std::move(reason), std::move(owner), to_scheduler_time(now));
      !s) {
    return;  // not in the scheduler (no healthy chips): nothing to tell it
  }
  node_states_[node_id] = state;
}

const std::string* SchedulerBridge::inventory_pending(const std::string& node_id) const {
  auto it = inventory_pending_.find(node_id);
  return it == inventory_pending_.end() ? nullptr : &it->second;
}

std::vector<std::string> SchedulerBridge::nodes_with_inventory_pending() const {
  std::vector<std::string> out;
  for (const auto& [id, why] : inventory_pending_) out.push_back(id);
  return out;
}

bool SchedulerBridge::knows_other_chips(const scheduler::NodeInfo& info) const {
  const auto known = scheduler_.node(info.id);
  if (!known) return true;
  if (known->info.chips.size() != info.chips.size() || known->info.revision != info.revision) return true;
  for (std::size_t i = 0; i < info.chips.size(); ++i) {
    if (known->info.chips[i].index != info.chips[i].index) return true;
  }
  return false;
}

bool SchedulerBridge::node_holds_leases(const std::string& node_id) const {
  return !scheduler_.leased_chips(node_id).empty();
}

void SchedulerBridge::upsert_node(const scheduler::NodeInfo& info, TimeMs now) {
  const std::string& node_id = info.id;
  // The scheduler keeps a node's leases by chip position, so a busy node keeps its chip list.
  std::string refused;
  if (info.chips.empty()) {
    refused = "it reports no healthy chips";
  } else if (node_holds_leases(node_id) && knows_other_chips(info)) {
    refused = "its chips changed while leases hold some of them; it takes work once they have ended";
  } else if (auto s = scheduler_.upsert_node(info, to_scheduler_time(now)); !s) {
    refused = s.error().message;
  }
  auto pending = inventory_pending_.find(node_id);
  if (refused.empty()) {
    // A node new to the scheduler learns its state at the next sync.
    node_changed(node_id);
    if (pending != inventory_pending_.end()) {
      if (!pending->second.empty()) {
        sink_.log(action::Severity::info,
                  fmt::format("node {}: the {} chips of its latest hello are scheduled", node_id, info.chips.size()));
      }
      inventory_pending_.erase(pending);
    }
    return;
  }
  if (pending == inventory_pending_.end() || pending->second != refused) {
    sink_.log(action::Severity::warn, fmt::format("node {} takes no new work: {}", node_id, refused));
    inventory_pending_[node_id] = refused;
    node_changed(node_id);
  }
}

}  // namespace kiln::coordinator
