// The life of developer leases (kiln lease) as the core drives it: requests, releases, watches,
// expiry, revocation, recovery after a restart, and the scheduler's decisions about lease
// requests. What a lease's life does to the jobs inside it goes back to the router as a
// LeaseFollowUp.
#include "coordinator/core/lease_lifecycle.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_table.h"
#include "coordinator/core/scheduler_decisions.h"

namespace kiln::coordinator {

using namespace detail;

namespace {

std::string revoked_text(std::uint64_t lease_id) {
  return fmt::format("lease L{} revoked: its preemption grace ended", lease_id);
}

// A lease ending on the coordinator's own finding, giving back `hand_over` if it holds chips.
lease_follow_up::Ended ending(std::uint64_t lease_id, std::string why,
                              std::optional<scheduler::LeaseId> hand_over = std::nullopt) {
  lease_follow_up::Ended ended;
  ended.lease_id = lease_id;
  ended.why = std::move(why);
  ended.hand_over = hand_over;
  return ended;
}

lease_follow_up::Revoked revocation(std::uint64_t lease_id, bool requeue,
                                    std::optional<scheduler::LeaseId> hand_over = std::nullopt) {
  lease_follow_up::Revoked revoked;
  revoked.lease_id = lease_id;
  revoked.why = revoked_text(lease_id);
  revoked.requeue = requeue;
  revoked.hand_over = hand_over;
  return revoked;
}

}  // namespace

protocol::LeaseList LeaseLifecycle::list(const protocol::ListLeases& request) const {
  protocol::LeaseList list;
  for (const auto& [id, lease] : dev_leases_.all()) {
    if (!request.include_ended && lease.summary.state == LeaseState::ended) continue;
    if (list.leases.size() >= 1000) break;
    list.leases.push_back(lease.summary);
  }
  return list;
}

std::optional<LeaseFollowUp> LeaseLifecycle::recover(LeaseRecord record, TimeMs now, const JobTable& jobs) {
  const std::uint64_t id = record.summary.lease_id;
  DevLease recovered;
  recovered.summary = record.summary;
  DevLease& lease = dev_leases_.add(std::move(recovered));
  lease.requested_at_ms = record.requested_at_ms;
  lease.start_at_ms = record.start_at_ms;
  lease.summary.job_ids = jobs.in_lease(id);
  const LeaseState state = lease.summary.state;
  if (state == LeaseState::ended) return std::nullopt;
  auto requeue = [&](const std::string& why) -> std::optional<LeaseFollowUp> {
    if (auto s = resubmit_lease(lease, now); !s) {
      return ending(id, fmt::format("{}; it cannot be queued again: {}", why, s.error().message));
    }
    lease_event(lease, LeaseEventKind::requeued, why + "; queued again keeping its age", jobs);
    return std::nullopt;
  };
  if (state == LeaseState::pending) {
    if (auto s = resubmit_lease(lease, now); !s) {
      return ending(id, "cannot be queued again after the coordinator restarted: " + s.error().message);
    }
    return std::nullopt;
  }
  if (static_cast<TimeMs>(lease.summary.expires_at_ms) <= now) {
    return ending(id, "expired while the coordinator was down");
  }
  // Granted, or under notice: the same chips are held again, from when they were granted, so
  // the expiry stays; the nodes have until the liveness timeout to register (CoordinatorCore::lose_silent_nodes).
  std::vector<scheduler::Placement> placement;
  for (const auto& p : lease.summary.placement) {
    auto node = ctx_.registry.nodes().find(p.node_id);
    if (node == ctx_.registry.nodes().end() || node->second.summary.state == NodeState::lost) {
      return requeue(fmt::format("its node {} was lost when the coordinator restarted", p.node_id));
    }
    scheduler::Placement held{p.node_id, {}};
    for (std::uint32_t chip : p.chip_indices) held.chips.push_back(static_cast<int>(chip));
    placement.push_back(std::move(held));
  }
  const scheduler::Request req = lease_request(lease);
  auto held = ctx_.scheduler().restore_lease(req, placement,
                                             ctx_.to_scheduler_time(static_cast<TimeMs>(lease.summary.granted_at_ms)),
                                             ctx_.to_scheduler_time(now));
  if (!held) {
    return requeue("its chips could not be held again after the coordinator restarted (" + held.error().message +
                   ")");
  }
  lease.scheduler_lease = *held;
  dev_leases_.set_recovered_under_notice(lease, state == LeaseState::preempting);
  ctx_.log(action::Severity::info, fmt::format("lease L{} ({}) holds its chips again until {}", id, lease.summary.owner,
                                               ctx_.clock.text(static_cast<TimeMs>(lease.summary.expires_at_ms))));
  return std::nullopt;
}

std::optional<LeaseAsked> LeaseLifecycle::request(const std::string& client, const Caller& caller,
                                                  const protocol::Envelope& m, const protocol::RequestLease& request,
                                                  TimeMs now) {
  if (!client_role_may_submit(caller.role, request.priority_class)) {
    ctx_.reply_error(client, m.header.id, Errc::unauthorized,
                     fmt::format("role {} may not lease chips as {}; developers and lab engineers lease as experiment, "
                                 "which CI work may preempt with notice",
                                 protocol::enum_name(caller.role), protocol::enum_name(request.priority_class)));
    return std::nullopt;
  }
  if ((request.chips == 0) == (request.nodes == 0)) {
    ctx_.reply_error(client, m.header.id, Errc::invalid_argument,
                     "ask for chips on one node (--chips 1, 2, 4 or 8) or for whole nodes (--nodes N), not both");
    return std::nullopt;
  }
  if (auto never = ctx_.registry.never_placeable(request.hardware_revision, request.nodes,
                                                 request.nodes > 0 ? 0 : request.chips, "")) {
    ctx_.reply_error(client, m.header.id, Errc::invalid_argument,
                     fmt::format("this lease could never be granted: {}", *never));
    return std::nullopt;
  }
  const std::size_t active = dev_leases_.active();
  if (active >= ctx_.knobs.max_active_leases) {
    ctx_.reply_error(
        client, m.header.id, Errc::unavailable,
        fmt::format("{} leases are already pending or granted (max_active_leases); release one or retry later",
                    active));
    return std::nullopt;
  }
  constexpr TimeMs kMaxBookingAheadMs = 30LL * 24 * 3600 * 1000;
  // The window is set on the wall clock: it opens when the wall clock reads start_at_ms.
  const TimeMs start_at = static_cast<TimeMs>(request.start_at_ms) - ctx_.clock.wall_offset_ms();
  if (request.start_at_ms != 0 && (start_at < now || start_at > now + kMaxBookingAheadMs)) {
    ctx_.reply_error(client, m.header.id, Errc::invalid_argument,
                     "start_at_ms must be in the next 30 days (or 0 for as soon as possible)");
    return std::nullopt;
  }
  const std::uint64_t lease_id = dev_leases_.next_id();
  scheduler::Request req;
  if (request.start_at_ms != 0) req.not_before_ms = ctx_.to_scheduler_time(start_at);
  req.id = ctx_.bridge.request_of(request_owner::DevLease{lease_id});
  req.name = describe(request_owner::DevLease{lease_id});
  req.cls = to_request_class(request.priority_class);
  req.chips = request.nodes > 0 ? 1 : static_cast<int>(request.chips);
  req.nodes = static_cast<int>(request.nodes);
  if (!request.hardware_revision.empty()) req.revision = request.hardware_revision;
  req.expected_duration_ms = static_cast<DurationMs>(request.duration_ms);
  req.lease_ms = static_cast<DurationMs>(request.duration_ms);
  req.submit_ms = ctx_.to_scheduler_time(now);
  if (auto s = ctx_.scheduler().submit(req, ctx_.to_scheduler_time(now)); !s) {
    ctx_.reply_error(client, m.header.id, s.error().code, s.error().message);
    return std::nullopt;
  }
  DevLease added;
  added.summary.lease_id = lease_id;
  DevLease& lease = dev_leases_.add(std::move(added));
  lease.requested_at_ms = now;
  lease.start_at_ms = request.start_at_ms;
  lease.summary.lease_id = lease_id;
  lease.summary.state = LeaseState::pending;
  lease.summary.priority_class = request.priority_class;
  lease.summary.owner = caller.key_name;
  lease.summary.chips = request.chips;
  lease.summary.nodes = request.nodes;
  lease.summary.hardware_revision = request.hardware_revision;
  lease.summary.duration_ms = request.duration_ms;
  lease.summary.requested_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, now));
  const std::string asked = fmt::format(
      "{} for {} ({}{})",
      request.nodes > 0 ? fmt::format("{} whole nodes", request.nodes) : fmt::format("{} chips", request.chips),
      human_duration(static_cast<TimeMs>(request.duration_ms)), protocol::enum_name(request.priority_class),
      request.hardware_revision.empty() ? "" : ", revision " + request.hardware_revision);
  ctx_.log(action::Severity::info, fmt::format("lease L{} requested by {}: {}", lease_id, caller.key_name, asked));
  ctx_.audit(caller, "lease_requested", fmt::format("lease L{} of {}", lease_id, caller.key_name), asked);
  return LeaseAsked{client, m.header.id, lease_id, req.id};
}

void LeaseLifecycle::answer_request(const LeaseAsked& asked, TimeMs now) {
  DevLease& now_lease = dev_leases_.all().at(asked.lease_id);
  if (now_lease.summary.state == LeaseState::granted) {
    ctx_.sink.push(action::ToClient{asked.client, protocol::LeaseGranted{now_lease.summary}, asked.corr});
    return;
  }
  auto explanation = ctx_.scheduler().explain(asked.request, ctx_.to_scheduler_time(now));
  protocol::LeasePending pending;
  pending.explanation = text::utf8_head(explanation_text(ctx_, explanation, now), protocol::kMessageText.max_len);
  if (explanation.expected_start_ms) {
    pending.expected_start_ms =
        static_cast<std::uint64_t>(std::max<TimeMs>(0, ctx_.from_scheduler_time(*explanation.expected_start_ms)));
  }
  now_lease.summary.detail = pending.explanation;
  pending.lease = now_lease.summary;
  dev_leases_.save(now_lease);
  ctx_.sink.push(action::ToClient{asked.client, std::move(pending), asked.corr});
}

std::optional<LeaseFollowUp> LeaseLifecycle::release(const std::string& client, const Caller& caller,
                                                     const protocol::Envelope& m, const protocol::ReleaseLease& release,
                                                     TimeMs now) {
  DevLease* lease = callers_lease(client, caller, m, release.lease_id, "only its owner, ops or admin may release it");
  if (!lease) return std::nullopt;
  if (lease->summary.state == LeaseState::ended) {
    ctx_.reply_error(client, m.header.id, Errc::conflict,
                     fmt::format("lease L{} already ended: {}", release.lease_id, lease->summary.detail));
    return std::nullopt;
  }
  lease_follow_up::Ended released =
      ending(release.lease_id, fmt::format("released by {}", caller.key_name), release_lease_chips(*lease, now));
  released.actor = caller;
  released.client = client;
  released.corr = m.header.id;
  return released;
}

void LeaseLifecycle::watch(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                           const protocol::WatchLease& watch, TimeMs now) {
  DevLease* lease = callers_lease(client, caller, m, watch.lease_id, "watch a lease of your own");
  if (!lease) return;
  for (const auto& event : lease->events) {
    if (event.seq > watch.after_seq) {
      ctx_.sink.push(action::ToClient{client, event, m.header.id});
      return;
    }
  }
  // Events the watcher has not seen are no longer kept (they were before a restart, or it fell
  // behind): the lease as it is now tells it what they did, at once.
  const bool missed = watch.after_seq < lease->summary.event_seq;
  if (missed || watch.wait_ms == 0 || lease->summary.state == LeaseState::ended ||
      !dev_leases_.park(LeaseWatch{client, m.header.id, watch.lease_id, watch.after_seq, now + watch.wait_ms})) {
    ctx_.sink.push(action::ToClient{client, status_event(*lease, now), m.header.id});
  }
}

DevLease* LeaseLifecycle::callers_lease(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                        std::uint64_t lease_id, std::string_view otherwise) {
  DevLease* lease = dev_leases_.find(lease_id);
  if (!lease) {
    ctx_.reply_error(client, m.header.id, Errc::not_found,
                     fmt::format("no lease L{}; `kiln leases` lists the leases", lease_id));
    return nullptr;
  }
  if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
    ctx_.reply_error(client, m.header.id, Errc::unauthorized,
                     fmt::format("lease L{} belongs to {}; {}", lease_id, lease->summary.owner, otherwise));
    return nullptr;
  }
  return lease;
}

protocol::LeaseEvent LeaseLifecycle::status_event(const DevLease& lease, TimeMs now) const {
  protocol::LeaseEvent event;
  event.seq = lease.summary.event_seq;
  event.kind = LeaseEventKind::status;
  event.lease = lease.summary;
  switch (lease.summary.state) {
    case LeaseState::pending: {
      const auto request = ctx_.bridge.find_request(request_owner::DevLease{lease.summary.lease_id});
      KILN_ASSERT(request.has_value(), "a pending lease has a request in the scheduler");
      event.message = explanation_text(ctx_, ctx_.scheduler().explain(*request, ctx_.to_scheduler_time(now)), now);
      break;
    }
    case LeaseState::granted:
      event.message =
          fmt::format("granted; expires in {}", human_duration(static_cast<TimeMs>(lease.summary.expires_at_ms) - now));
      break;
    case LeaseState::preempting:
      event.message = fmt::format("under preemption notice; revoked in {}",
                                  human_duration(static_cast<TimeMs>(lease.summary.grace_deadline_ms) - now));
      break;
    case LeaseState::ended: event.message = "ended: " + lease.summary.detail; break;
  }
  event.message = text::utf8_head(event.message, protocol::kMessageText.max_len);
  event.lease.detail = text::utf8_head(event.lease.detail, protocol::kMessageText.max_len);
  return event;
}

void LeaseLifecycle::lease_event(DevLease& lease, LeaseEventKind kind, std::string message, const JobTable& jobs,
                                 const Caller* actor) {
  if (kind != LeaseEventKind::status) {
    const std::string action = kind == LeaseEventKind::preempt_notice ? "preempted"
                                                                      : "lease_" + std::string(protocol::enum_name(kind));
    const std::string subject = fmt::format("lease L{} of {}", lease.summary.lease_id, lease.summary.owner);
    if (actor != nullptr) {
      ctx_.audit(*actor, action, subject, message);
    } else {
      ctx_.audit(action, subject, message);
    }
  }
  dev_leases_.record_event(lease, kind, std::move(message), jobs.in_lease(lease.summary.lease_id));
}

void LeaseLifecycle::record_end(const lease_follow_up::Ended& ended, const JobTable& jobs) {
  DevLease* lease = dev_leases_.find(ended.lease_id);
  KILN_ASSERT(lease != nullptr, "a lease ending is kept until its end is recorded");
  lease->summary.state = LeaseState::ended;
  lease->summary.placement.clear();
  lease->summary.grace_deadline_ms = 0;
  lease->scheduler_lease.reset();
  lease_event(*lease, LeaseEventKind::ended, ended.why, jobs, ended.actor ? &*ended.actor : nullptr);
  dev_leases_.prune_ended();
  if (!ended.client.empty()) {
    ctx_.sink.push(
        action::ToClient{ended.client, protocol::Ok{fmt::format("lease L{} released", ended.lease_id)}, ended.corr});
  }
}

std::optional<scheduler::LeaseId> LeaseLifecycle::release_lease_chips(const DevLease& lease, TimeMs now) {
  const scheduler::RequestId request = ctx_.bridge.request_of(request_owner::DevLease{lease.summary.lease_id});
  auto held = ctx_.scheduler().lease_of(request);
  if (!held && ctx_.scheduler().is_pending(request)) {
    (void)ctx_.scheduler().cancel(request, ctx_.to_scheduler_time(now));
  }
  return held;
}

scheduler::Request LeaseLifecycle::lease_request(const DevLease& lease) {
  scheduler::Request req;
  req.id = ctx_.bridge.request_of(request_owner::DevLease{lease.summary.lease_id});
  req.name = describe(request_owner::DevLease{lease.summary.lease_id});
  req.cls = to_request_class(lease.summary.priority_class);
  req.chips = lease.summary.nodes > 0 ? 1 : static_cast<int>(lease.summary.chips);
  req.nodes = static_cast<int>(lease.summary.nodes);
  if (!lease.summary.hardware_revision.empty()) req.revision = lease.summary.hardware_revision;
  req.expected_duration_ms = static_cast<DurationMs>(lease.summary.duration_ms);
  req.lease_ms = req.expected_duration_ms;
  req.submit_ms = ctx_.to_scheduler_time(lease.requested_at_ms);
  return req;
}

Status LeaseLifecycle::resubmit_lease(DevLease& lease, TimeMs now) {
  scheduler::Request req = lease_request(lease);
  if (const TimeMs start_at = static_cast<TimeMs>(lease.start_at_ms) - ctx_.clock.wall_offset_ms();
      lease.start_at_ms != 0 && start_at > now) {
    req.not_before_ms = ctx_.to_scheduler_time(start_at);
  }
  lease.scheduler_lease.reset();
  lease.summary.state = LeaseState::pending;
  dev_leases_.set_recovered_under_notice(lease, false);
  lease.summary.placement.clear();
  lease.summary.grace_deadline_ms = 0;
  lease.summary.expires_at_ms = 0;
  return ctx_.scheduler().submit(req, ctx_.to_scheduler_time(now));
}

std::optional<LeaseFollowUp> LeaseLifecycle::end_if_due(std::uint64_t lease_id, TimeMs now, const JobTable& jobs) {
  DevLease* due = dev_leases_.find(lease_id);
  if (due == nullptr) return std::nullopt;  // forgotten meanwhile, ended by what another lease's end did
  DevLease& lease = *due;
  const auto state = lease.summary.state;
  if (state != LeaseState::granted && state != LeaseState::preempting) return std::nullopt;
  if (lease.summary.expires_at_ms > 0 && now >= static_cast<TimeMs>(lease.summary.expires_at_ms)) {
    return ending(lease_id, "expired", release_lease_chips(lease, now));
  }
  if (state != LeaseState::preempting || now < static_cast<TimeMs>(lease.summary.grace_deadline_ms)) {
    return std::nullopt;
  }
  // Without running jobs the scheduler's own revocation at this deadline does the same,
  // unless the notice predates a coordinator restart and the scheduler does not know of it.
  if (!jobs.runs_in_lease(lease_id) && !lease.recovered_under_notice) return std::nullopt;
  // The chips are looked up before the jobs are told to stop: telling them changes nothing the
  // scheduler holds.
  return revocation(lease_id, true, release_lease_chips(lease, now));
}

std::optional<LeaseFollowUp> LeaseLifecycle::requeue_revoked(std::uint64_t lease_id, TimeMs now,
                                                             const JobTable& jobs) {
  DevLease& lease = dev_leases_.all().at(lease_id);
  if (auto s = resubmit_lease(lease, now); !s) {
    return ending(lease_id,
                                  "revoked after its preemption grace and cannot be queued again: " + s.error().message);
  }
  lease_event(lease, LeaseEventKind::requeued, "revoked at the end of its grace; queued again keeping its age", jobs);
  return std::nullopt;
}

std::optional<LeaseFollowUp> LeaseLifecycle::lease_node_lost(DevLease& lease, const std::string& node_id, TimeMs now,
                                                             const JobTable& jobs) {
  // The scheduler forgot the request with the node: ask again with the original age.
  if (auto s = resubmit_lease(lease, now); !s) {
    return ending(
        lease.summary.lease_id,
        fmt::format("node {} was lost and the lease cannot be queued again: {}", node_id, s.error().message));
  }
  lease_event(lease, LeaseEventKind::requeued, fmt::format("node {} was lost; queued again keeping its age", node_id),
              jobs);
  return std::nullopt;
}

bool LeaseLifecycle::runs_on_lease_chips(const JobRecord& job) const {
  auto it = dev_leases_.all().find(job.lease_id);
  if (it == dev_leases_.all().end()) return false;
  const DevLease& lease = it->second;
  if (lease.summary.state != LeaseState::granted && lease.summary.state != LeaseState::preempting) return false;
  for (const auto& p : lease.summary.placement) {
    if (p.node_id != job.summary.node_id) continue;
    return std::all_of(job.summary.chip_indices.begin(), job.summary.chip_indices.end(), [&](std::uint32_t chip) {
      return std::find(p.chip_indices.begin(), p.chip_indices.end(), chip) != p.chip_indices.end();
    });
  }
  return false;
}

void LeaseLifecycle::answer_watches(TimeMs now) {
  for (const LeaseWatch& w : dev_leases_.take_due_watches(now)) {
    ctx_.sink.to_client(w.client, status_event(*dev_leases_.find(w.lease_id), now), w.corr);
  }
}

std::vector<const protocol::LeaseSummary*> LeaseLifecycle::granted() const {
  std::vector<const protocol::LeaseSummary*> granted;
  for (const auto& [lease_id, lease] : dev_leases_.all()) {
    if (lease.summary.state == LeaseState::granted) granted.push_back(&lease.summary);
  }
  return granted;
}

void LeaseLifecycle::jobs_dispatched(const JobTable& jobs) {
  for (auto& [lease_id, lease] : dev_leases_.all()) {
    if (lease.summary.state == LeaseState::granted) lease.summary.job_ids = jobs.in_lease(lease_id);
  }
}

DevLease* LeaseLifecycle::lease_holding(std::uint64_t lease_id, std::optional<scheduler::LeaseId> lease) {
  DevLease* dev = dev_leases_.find(lease_id);
  if (!dev || dev->scheduler_lease != lease) return nullptr;
  return dev;
}

std::vector<std::uint64_t> LeaseLifecycle::holding_chips_on(const std::string& node_id) const {
  // Collected first: ending a lease may prune ended ones from dev_leases_.all().
  std::vector<std::uint64_t> leases_here;
  for (const auto& [id, lease] : dev_leases_.all()) {
    const auto request = ctx_.bridge.find_request(request_owner::DevLease{id});
    if (!lease.scheduler_lease || !request || ctx_.scheduler().lease_of(*request) != lease.scheduler_lease) continue;
    const bool here = std::any_of(lease.summary.placement.begin(), lease.summary.placement.end(),
                                  [&](const protocol::LeasePlacement& p) { return p.node_id == node_id; });
    if (here) leases_here.push_back(id);
  }
  return leases_here;
}

std::optional<LeaseFollowUp> LeaseLifecycle::node_lost(std::uint64_t lease_id, const std::string& node_id, TimeMs now,
                                                       const JobTable& jobs) {
  (void)ctx_.scheduler().cancel(ctx_.bridge.request_of(request_owner::DevLease{lease_id}), ctx_.to_scheduler_time(now));
  return lease_node_lost(dev_leases_.all().at(lease_id), node_id, now, jobs);
}

void LeaseLifecycle::granted(const scheduler::LeaseGranted& granted, std::uint64_t lease_id, TimeMs now,
                             const JobTable& jobs) {
  DevLease* lease = dev_leases_.find(lease_id);
  if (!lease || lease->summary.state != LeaseState::pending) {
    // Released in the same step that granted it: give the chips straight back.
    if (ctx_.scheduler().lease_of(granted.request) == granted.lease) {
      (void)ctx_.scheduler().release(granted.lease, ctx_.to_scheduler_time(now));
    }
    return;
  }
  lease->scheduler_lease = granted.lease;
  lease->summary.state = LeaseState::granted;
  lease->summary.granted_at_ms = static_cast<std::uint64_t>(std::max<TimeMs>(0, now));
  lease->summary.expires_at_ms =
      static_cast<std::uint64_t>(std::max<TimeMs>(0, ctx_.from_scheduler_time(granted.expires_at_ms)));
  lease->summary.grace_deadline_ms = 0;
  lease->summary.placement.clear();
  std::vector<std::string> where;
  for (const auto& p : granted.placement) {
    protocol::LeasePlacement placement{p.node, {}};
    for (int chip : p.chips) placement.chip_indices.push_back(static_cast<std::uint32_t>(chip));
    where.push_back(fmt::format("{} chips [{}]", p.node, fmt::join(p.chips, ",")));
    lease->summary.placement.push_back(std::move(placement));
  }
  lease_event(*lease, LeaseEventKind::granted,
              fmt::format("granted {} until {}{}", fmt::join(where, " and "),
                          ctx_.clock.text(static_cast<TimeMs>(lease->summary.expires_at_ms)),
                          granted.borrowed ? " (on borrowed capacity: reclaimed first)" : ""),
              jobs);
}

std::optional<LeaseFollowUp> LeaseLifecycle::preempt_notice(const scheduler::PreemptNotice& notice,
                                                            std::uint64_t lease_id, TimeMs grace_ms,
                                                            const std::string& reason, TimeMs now) {
  DevLease* lease = lease_holding(lease_id, notice.lease);
  if (!lease) return std::nullopt;
  const auto deadline = static_cast<std::uint64_t>(std::max<TimeMs>(0, now + grace_ms));
  // A notice given before a coordinator restart still holds: the earlier deadline stands.
  const bool noticed = lease->summary.state == LeaseState::preempting && lease->summary.grace_deadline_ms > 0;
  lease->summary.grace_deadline_ms = noticed ? std::min(lease->summary.grace_deadline_ms, deadline) : deadline;
  lease->summary.state = LeaseState::preempting;
  return lease_follow_up::Noticed{lease_id, grace_ms, reason};
}

void LeaseLifecycle::record_notice(const lease_follow_up::Noticed& noticed, TimeMs now, const JobTable& jobs) {
  const TimeMs grace_ms = noticed.grace_ms;
  lease_event(dev_leases_.all().at(noticed.lease_id), LeaseEventKind::preempt_notice,
              fmt::format("{}: release the lease in {} (at {}); it is then revoked and queued again keeping "
                          "its age",
                          noticed.reason, human_duration(grace_ms), ctx_.clock.text(now + grace_ms, grace_ms < kHourMs)),
              jobs);
}

std::optional<LeaseFollowUp> LeaseLifecycle::revoked(const scheduler::Revoke& revoke, std::uint64_t lease_id) {
  if (!lease_holding(lease_id, revoke.lease)) return std::nullopt;
  return revocation(lease_id, false);
}

void LeaseLifecycle::requeued(const scheduler::Requeued& requeued, std::uint64_t lease_id, const JobTable& jobs) {
  DevLease* lease = lease_holding(lease_id, requeued.previous_lease);
  if (!lease) return;
  lease->scheduler_lease.reset();
  lease->summary.state = LeaseState::pending;
  lease->summary.placement.clear();
  lease->summary.grace_deadline_ms = 0;
  lease->summary.expires_at_ms = 0;
  lease_event(*lease, LeaseEventKind::requeued, "preempted; queued again keeping its age", jobs);
}

std::optional<LeaseFollowUp> LeaseLifecycle::lease_lost(const scheduler::LeaseLost& lost, std::uint64_t lease_id,
                                                        TimeMs now, const JobTable& jobs) {
  DevLease* lease = lease_holding(lease_id, lost.lease);
  if (!lease) return std::nullopt;
  return lease_node_lost(*lease, lost.node, now, jobs);
}

std::optional<LeaseFollowUp> LeaseLifecycle::lease_expired(const scheduler::LeaseExpired& expired,
                                                           std::uint64_t lease_id) {
  if (!lease_holding(lease_id, expired.lease)) return std::nullopt;
  return ending(lease_id, "expired");
}

}  // namespace kiln::coordinator
