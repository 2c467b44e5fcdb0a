// The router: every message and tick comes in here, is put on the core's clock and goes to the
// room it is for; what a room decides comes back here for the next room, and after each input
// the scheduler's decisions are carried out (pump), each by the room of its owner.
#include "coordinator/core/coordinator_core.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/exhaustive.h"
#include "coordinator/core/core_rules.h"
#include "records/waiver.h"

namespace kiln::coordinator {

using namespace detail;

std::string CoreClock::text(TimeMs core_ms, bool with_seconds) const {
  return wall_clock_text(core_ms + wall_offset_ms_, with_seconds);
}

CoordinatorCore::CoordinatorCore(CoordinatorKnobs knobs, Snapshot recovered, Now clock_now,
                                 std::shared_ptr<const qualification::RiskRegister> waiver_register)
    : knobs_(knobs),
      clock_(clock_now),
      registry_(knobs.liveness_timeout_ms(),
                clock_now.wall_ms + std::max<TimeMs>(knobs.restart_grace_ms, knobs.liveness_timeout_ms())),
      bridge_(knobs.scheduler, clock_now.wall_ms, sink_),
      records_(std::move(recovered.records), std::move(waiver_register)),
      jobs_(context()),
      leases_(context()),
      scheduling_(context()),
      agents_(context()),
      rollouts_(context()),
      job_watches_(sink_, knobs.max_job_watches, knobs.max_job_watches_per_client, clock_now.wall_ms) {
  const TimeMs now = clock_.advance(clock_now);
  for (auto& node : recovered.nodes) registry_.recover(std::move(node), now);
  // The scheduler learns the recovered nodes as lost: nothing new goes to them before their
  // agents say hello, and the chips of jobs still running there can be given back first.
  for (const auto& [id, node] : registry_.nodes()) scheduling_.recovered_node(node, now);
  const std::size_t jobs_recovered = recovered.jobs.size();
  jobs_.recover(std::move(recovered.jobs));
  // Leases after the jobs (ending one ends its jobs), before the queued jobs go back to the
  // scheduler: a granted lease's chips are held again before anything else is placed.
  const std::size_t leases_recovered = recovered.leases.size();
  for (auto& lease : recovered.leases) carry_out(leases_.recover(std::move(lease), now, jobs_), now);
  leases_.prune_ended();
  const std::size_t resubmitted = jobs_.requeue_recovered(now, leases_);
  scheduling_.refresh_chip_counts(jobs_.index().take_nodes_changed(), jobs_.index());
  if (!recovered.nodes.empty() || jobs_recovered != 0 || leases_recovered != 0 || records_.held_count() != 0) {
    sink_.log(action::Severity::info,
              fmt::format("recovered {} nodes, {} jobs ({} active, {} queued again), {} developer leases ({} "
                          "active) and {} qualification records (the others are read from the store when asked "
                          "for) from the store",
                          registry_.nodes().size(), jobs_.all().size(), jobs_.active_count(), resubmitted,
                          leases_recovered, leases_.active(), records_.held_count()));
  }
  pump(now);
  jobs_.forget_ended(now);
}

std::optional<Action> CoordinatorCore::poll_action() {
  std::optional<Action> action = sink_.poll();
  // Every change of a job, lease or node is saved: its watchers hear of it from here, after the save.
  if (action) {
    if (const auto* saved = std::get_if<action::SaveJob>(&*action)) job_watches_.job_saved(saved->job);
    if (const auto* saved = std::get_if<action::SaveLease>(&*action)) job_watches_.lease_saved(saved->lease.summary);
    if (std::holds_alternative<action::SaveNode>(*action)) job_watches_.node_saved(clock_.latest_wall_ms());
  }
  return action;
}

void CoordinatorCore::pump(TimeMs now) {
  // A room carrying out a decision may call the scheduler again; what that decides comes next.
  while (std::optional<OwnedDecision> decision = scheduling_.next_decision(now, jobs_)) carry_out(*decision, now);
  dispatch_lease_jobs(now);
  scheduling_.refresh_chip_counts(jobs_.index().take_nodes_changed(), jobs_.index());
}

void CoordinatorCore::carry_out(const OwnedDecision& decision, TimeMs now) {
  // Each decision goes to the room of the request's owner.
  auto to_owner = [&](auto&& for_lease, auto&& for_job) {
    std::visit(Exhaustive{
                   [&](const request_owner::DevLease& o) { for_lease(o.lease_id); },
                   [&](const request_owner::Job& o) { for_job(o.job_id); },
                   [](const request_owner::StopHold&) {
                     KILN_ASSERT(false, "the bridge keeps the decisions about stop holds to itself");
                   },
               },
               decision.owner);
  };
  const TimeMs grace_ms = decision.grace_ms;
  const std::string& reason = decision.preempted_for;
  std::visit(Exhaustive{
                 [&](const scheduler::LeaseGranted& act) {
                   to_owner([&](std::uint64_t lease) { leases_.granted(act, lease, now, jobs_); },
                            [&](std::uint64_t job) { jobs_.granted(act, job, now); });
                 },
                 [&](const scheduler::PreemptNotice& act) {
                   to_owner(
                       [&](std::uint64_t lease) {
                         carry_out(leases_.preempt_notice(act, lease, grace_ms, reason, now), now);
                       },
                       [&](std::uint64_t job) { jobs_.preempt_notice(act, job, grace_ms, reason, now); });
                 },
                 [&](const scheduler::Revoke& act) {
                   to_owner([&](std::uint64_t lease) { carry_out(leases_.revoked(act, lease), now); },
                            [&](std::uint64_t job) { jobs_.revoked(act, job); });
                 },
                 [&](const scheduler::Requeued& act) {
                   to_owner([&](std::uint64_t lease) { leases_.requeued(act, lease, jobs_); },
                            [&](std::uint64_t job) { jobs_.requeued(act, job, now); });
                 },
                 [&](const scheduler::LeaseLost& act) {
                   to_owner([&](std::uint64_t lease) { carry_out(leases_.lease_lost(act, lease, now, jobs_), now); },
                            [&](std::uint64_t job) { jobs_.lease_lost(act, job, now, leases_); });
                 },
                 [&](const scheduler::LeaseExpired& act) {
                   to_owner([&](std::uint64_t lease) { carry_out(leases_.lease_expired(act, lease), now); },
                            [&](std::uint64_t job) { jobs_.lease_expired(act, job, now); });
                 },
             },
             decision.action);
}

std::optional<TimeMs> CoordinatorCore::next_deadline() const {
  std::optional<TimeMs> next;
  auto consider = [&](std::optional<TimeMs> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  consider(agents_.next_deadline());
  consider(jobs_.next_deadline());
  if (auto t = bridge_.scheduler().next_deadline()) consider(bridge_.to_core_time(*t));
  consider(leases_.next_deadline());
  consider(rollouts_.next_deadline());
  consider(job_watches_.next_deadline());
  if (!next) return std::nullopt;
  return clock_.to_monotonic(*next);
}

void CoordinatorCore::on_agent_message(const std::string& peer, const Caller& caller,
                                       const protocol::Envelope& m, Now clock_now) {
  const TimeMs now = clock_.advance(clock_now);
  KILN_ASSERT(caller.role == Role::agent, "the shell admits only agent keys on the agent socket");
  if (const auto* hello = std::get_if<protocol::Hello>(&m.body)) {
    register_node(peer, caller, m, *hello, now);
    pump(now);
    return;
  }
  const std::optional<std::string> node_id = agents_.node_of_session(peer, m, now);
  if (!node_id) return;

  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Heartbeat>) {
          jobs_.reconcile_heartbeat(peer, *node_id, body, now);
          sink_.to_agent(peer, protocol::Heartbeat{}, m.header.id);
          scheduling_.sync_node_states(now, jobs_);
        } else if constexpr (std::is_same_v<T, protocol::JobStarted>) {
          jobs_.job_started(*node_id, body);
        } else if constexpr (std::is_same_v<T, protocol::JobFinished>) {
          const JobTable::ResultOutcome outcome = jobs_.job_finished(*node_id, body, now);
          // The requeue is saved before the acknowledgement below: acknowledged first, a crash in
          // between would leave the store holding the attempt as running, and a restart would count
          // it lost although its agent has forgotten it.
          if (outcome.let_go_under_notice) pump(now);
          if (outcome.ended) job_ended(*node_id, *outcome.ended, now);
          // Acknowledged in every case, once stored when it mattered, so the agent can forget it.
          sink_.to_agent(peer, protocol::JobFinishedAck{body.job_id, body.attempt}, m.header.id);
        } else if constexpr (std::is_same_v<T, protocol::HealthReport>) {
          carry_out(agents_.health_report(*node_id, body, now), now);
        } else if constexpr (std::is_same_v<T, protocol::ErrorReply>) {
          sink_.log(action::Severity::warn,
                    fmt::format("node {} refused message {}: {}: {}", *node_id, m.header.corr, body.code, body.message));
        } else {
          sink_.to_agent(peer,
                         protocol::ErrorReply{std::string(to_string(Errc::bad_message)),
                                              fmt::format("'{}' is not a message an agent may send", T::kType),
                                              {}},
                         m.header.id);
        }
      },
      m.body);
  pump(now);
  jobs_.forget_ended(now);
}

namespace {

// Why a request about what this coordinator keeps in the store only (`what` says "job 7 is") got
// no answer, and what to do.
std::string store_unreadable(std::string_view what, const Error& error) {
  return fmt::format("{} kept in the store only, and reading the store failed ({}); try again, and if it "
                     "persists run `kiln-coordinator check-store`",
                     what, error.message);
}

// The job a client request is about, or 0.
std::uint64_t job_named(const protocol::Body& body, const NodeRegistry& registry) {
  if (const auto* get = std::get_if<protocol::GetJob>(&body)) return get->job_id;
  if (const auto* recheck = std::get_if<protocol::RecheckNode>(&body)) {
    // The rerun copies the job whose wrong outputs quarantined the node.
    const auto node = registry.nodes().find(recheck->node_id);
    return node != registry.nodes().end() ? node->second.summary.wrong_results_job_id : 0;
  }
  if (const auto* cancel = std::get_if<protocol::CancelJob>(&body)) return cancel->job_id;
  if (const auto* why = std::get_if<protocol::QueueWhy>(&body)) return why->job_id;
  return 0;
}

// Why the caller's role may not write this record, if it may not: a waiver is a person's word (an
// approver of the gate's team), every other record is CI's.
std::optional<std::string> put_refusal(const Caller& caller, const protocol::PutRecord& put) {
  if (put.kind == protocol::RecordKind::waiver) {
    if (caller.role != Role::ci) return std::nullopt;
    return fmt::format("role {} may not waive a gate; an approver of the gate's team does, with their own key (kiln "
                       "waive)",
                       protocol::enum_name(caller.role));
  }
  if (caller.role == Role::ci || privileged(caller.role)) return std::nullopt;
  return fmt::format("role {} may not write {} records; CI, ops and admin keys record changes, bundles and "
                     "qualification results",
                     protocol::enum_name(caller.role), protocol::enum_name(put.kind));
}

}  // namespace

void CoordinatorCore::on_client_message(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                        Now clock_now) {
  KILN_ASSERT(caller.role != Role::agent, "the shell refuses agent keys on the client socket");
  if (const std::uint64_t job_id = job_named(m.body, registry_); jobs_.may_recall(job_id)) {
    // An ended job this coordinator let go of: the request waits for the store to read it back.
    auto& waiting = waiting_for_recall_[job_id];
    waiting.push_back(RecallWaiter{client, caller, m, clock_now});
    if (waiting.size() == 1) sink_.push(action::RecallJob{job_id});
    return;
  }
  if (const auto* put = std::get_if<protocol::PutRecord>(&m.body)) {
    // Refused for its writer's role before the store reads anything for it.
    if (auto refusal = put_refusal(caller, *put)) {
      sink_.reply_error(client, m.header.id, Errc::unauthorized, *refusal);
      return;
    }
    const auto needed = records_.records_needed(*put);
    if (!needed.empty() || !puts_waiting_.empty()) {
      // Records this coordinator keeps in the store only: the put waits for them to be read back,
      // after the puts already waiting.
      puts_waiting_.push_back(RecallWaiter{client, caller, m, clock_now});
      recall(needed);
      return;
    }
  }
  take_client_message(client, caller, m, clock_now);
}

void CoordinatorCore::recall(const std::vector<std::pair<protocol::RecordKind, std::string>>& records) {
  for (const auto& record : records) {
    if (records_recalling_.insert(record).second) sink_.push(action::RecallRecord{record.first, record.second});
  }
}

void CoordinatorCore::on_record_recalled(protocol::RecordKind kind, const std::string& key,
                                         Result<std::vector<protocol::RecordEntry>> found) {
  const bool asked = records_recalling_.erase(std::make_pair(kind, key)) != 0;
  KILN_ASSERT(asked, "a record is read back only for the puts that wait for it");
  if (!found) {
    // The puts waiting cannot be decided: each is refused, and what was known is read again.
    const std::string why = store_unreadable(fmt::format("{} {} is", protocol::enum_name(kind), key), found.error());
    for (const RecallWaiter& w : puts_waiting_) sink_.reply_error(w.client, w.message.header.id, Errc::unavailable, why);
    puts_waiting_.clear();
  } else if (found->size() == 1 && found->front().kind == kind && found->front().key == key) {
    records_.take_recalled(std::move(found->front()));
  } else {
    records_.take_absent(kind, key);
  }
  while (!puts_waiting_.empty()) {
    const auto& put = std::get<protocol::PutRecord>(puts_waiting_.front().message.body);
    if (const auto needed = records_.records_needed(put); !needed.empty()) {
      recall(needed);
      break;
    }
    const RecallWaiter w = std::move(puts_waiting_.front());
    puts_waiting_.pop_front();
    take_client_message(w.client, w.caller, w.message, w.now);
  }
  // Every read asked for from now on is made after the writes of the puts taken.
  if (records_recalling_.empty() && puts_waiting_.empty()) records_.forget_recalled();
}

void CoordinatorCore::on_job_recalled(std::uint64_t job_id, Result<std::optional<JobRecord>> found) {
  auto waiting = waiting_for_recall_.extract(job_id);
  KILN_ASSERT(!waiting.empty(), "a job is recalled only for the requests that wait for it");
  if (!found) {
    const std::string why = store_unreadable(fmt::format("job {} is", job_id), found.error());
    for (const RecallWaiter& w : waiting.mapped()) {
      sink_.reply_error(w.client, w.message.header.id, Errc::unavailable, why);
    }
    return;
  }
  if (found->has_value()) {
    if (protocol::is_terminal((*found)->summary.state) && (*found)->summary.job_id == job_id) {
      jobs_.take_recalled(std::move(**found));
    } else {
      sink_.log(action::Severity::error,
                fmt::format("the store gave job {} back as job {} in state {}, but only ended jobs are let go: "
                            "run `kiln-coordinator check-store`",
                            job_id, (*found)->summary.job_id, protocol::enum_name((*found)->summary.state)));
    }
  }
  for (const RecallWaiter& w : waiting.mapped()) take_client_message(w.client, w.caller, w.message, w.now);
}

void CoordinatorCore::take_client_message(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                          Now clock_now) {
  const TimeMs now = clock_.advance(clock_now);
  const std::uint64_t corr = m.header.id;
  auto reply = [&](protocol::Body body) { sink_.to_client(client, std::move(body), corr); };
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, protocol::Whoami>) {
          reply(protocol::WhoamiReply{caller.key_name, caller.role, protocol::kProtocolVersion, KILN_VERSION});
        } else if constexpr (std::is_same_v<T, protocol::ListNodes>) {
          protocol::NodeList list = registry_.list(now);
          list.revision = job_watches_.nodes_revision();
          reply(std::move(list));
        } else if constexpr (std::is_same_v<T, protocol::ListJobs>) {
          reply(jobs_.list(body));
        } else if constexpr (std::is_same_v<T, protocol::GetJob>) {
          jobs_.get(client, corr, body);
        } else if constexpr (std::is_same_v<T, protocol::WatchJobs>) {
          job_watches_.watch(client, corr, body, jobs_.all(), [&](std::uint64_t lease_id) -> const protocol::LeaseSummary* {
            const DevLease* lease = leases_.find(lease_id);
            return lease == nullptr ? nullptr : &lease->summary;
          }, now);
        } else if constexpr (std::is_same_v<T, protocol::SubmitJob>) {
          submit(client, caller, m, body, 0, now);
        } else if constexpr (std::is_same_v<T, protocol::SubmitInLease>) {
          submit(client, caller, m, body.job, body.lease_id, now);
        } else if constexpr (std::is_same_v<T, protocol::SubmitGang>) {
          if (jobs_.submit_gang(client, caller, m, body, now, leases_)) scheduling_.sync_node_states(now, jobs_);
        } else if constexpr (std::is_same_v<T, protocol::CancelJob>) {
          jobs_.cancel(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::DrainNode>) {
          if (const std::optional<DrainTaken> taken = agents_.drain(client, caller, m, body)) {
            carry_out(taken->follow_ups, now);
            agents_.answer_drain(*taken);
          }
        } else if constexpr (std::is_same_v<T, protocol::RequestLease>) {
          if (const std::optional<LeaseAsked> asked = leases_.request(client, caller, m, body, now)) {
            // The grant, if there is one now, is among the scheduler's actions.
            pump(now);
            leases_.answer_request(*asked, now);
          }
        } else if constexpr (std::is_same_v<T, protocol::ReleaseLease>) {
          carry_out(leases_.release(client, caller, m, body, now), now);
        } else if constexpr (std::is_same_v<T, protocol::ListLeases>) {
          reply(leases_.list(body));
        } else if constexpr (std::is_same_v<T, protocol::WatchLease>) {
          leases_.watch(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::QuarantineNode>) {
          if (const std::optional<QuarantineTaken> taken = agents_.quarantine_request(client, caller, m, body, now)) {
            carry_out(taken->follow_ups, now);
            agents_.answer_quarantine(*taken, jobs_);
          }
        } else if constexpr (std::is_same_v<T, protocol::RecheckNode>) {
          if (const std::optional<RecheckAsked> asked = agents_.recheck_request(client, caller, m, body, jobs_)) {
            agents_.recheck_submitted(*asked, jobs_.submit_recheck(*jobs_.find(asked->failing_job_id),
                                                                   registry_.nodes().at(asked->node_id),
                                                                   asked->caller, now));
          }
        } else if constexpr (std::is_same_v<T, protocol::PutRecord>) {
          put_record(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::GetRecord>) {
          get_record(client, corr, body);
        } else if constexpr (std::is_same_v<T, protocol::ListRecords>) {
          list_records(client, corr, body);
        } else if constexpr (std::is_same_v<T, protocol::SetTicketState>) {
          set_ticket_state(client, caller, m, body, now);
        } else if constexpr (std::is_same_v<T, protocol::PutAudit>) {
          put_audit(client, caller, corr, body);
        } else if constexpr (std::is_same_v<T, protocol::GetRiskRegister>) {
          if (const qualification::RiskRegister* reg = records_.waiver_register()) {
            reply(protocol::RiskRegisterText{reg->source, reg->text});
          } else {
            sink_.reply_error(client, corr, Errc::not_found,
                              "this coordinator names no risk register, so it takes no waiver; set [coordinator] "
                              "risk_register in coordinator.toml to the register the qualifier uses and restart it "
                              "(docs/operations.md, \"Waivers\")");
          }
        } else if constexpr (std::is_same_v<T, protocol::ListEnvironments>) {
          reply(rollouts_.list(jobs_));
        } else if constexpr (std::is_same_v<T, protocol::ListQueue>) {
          reply(scheduling_.queue_list(body, now, jobs_, leases_));
        } else if constexpr (std::is_same_v<T, protocol::QueueWhy>) {
          scheduling_.queue_why(client, corr, body, now, jobs_, leases_);
        } else {
          sink_.reply_error(client, corr, Errc::bad_message,
                            fmt::format("'{}' is not a request a client may send", T::kType));
        }
      },
      m.body);
  pump(now);
  jobs_.forget_ended(now);
}

Result<std::uint64_t> CoordinatorCore::accept(const Caller& caller, const protocol::SubmitJob& submit,
                                              std::uint64_t lease_id, TimeMs now) {
  auto id = jobs_.accept(caller, submit, lease_id, now, leases_);
  // A maintenance job drains its node before anything else is placed there.
  if (id) scheduling_.sync_node_states(now, jobs_);
  return id;
}

void CoordinatorCore::submit(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                             const protocol::SubmitJob& submit, std::uint64_t lease_id, TimeMs now) {
  auto id = accept(caller, submit, lease_id, now);
  if (!id) {
    sink_.reply_error(client, m.header.id, id.error().code, std::move(id.error().message));
    return;
  }
  sink_.push(action::ToClient{client, protocol::JobAccepted{*id}, m.header.id});
}

void CoordinatorCore::start_installs(const std::vector<InstallDue>& installs, TimeMs now) {
  for (const InstallDue& install : installs) {
    rollouts_.install_submitted(install, accept(Rollouts::submitter(), install.job, 0, now));
  }
}

void CoordinatorCore::put_record(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                 const protocol::PutRecord& put, TimeMs now) {
  const bool waiver = put.kind == protocol::RecordKind::waiver;
  KILN_ASSERT(!put_refusal(caller, put), "a put refused for its writer's role is refused on arrival");
  // The waiver a new one replaces, for the audit line (the record book holds waivers).
  std::optional<qualification::Waiver> replaced;
  if (const protocol::RecordEntry* held = waiver ? records_.get(put.kind, put.key) : nullptr) {
    auto earlier = qualification::waiver_from_json(nlohmann::json::parse(held->document));
    KILN_ASSERT(earlier.has_value(), "the record book stores checked waivers");
    replaced = std::move(*earlier);
  }
  auto record = records_.put(put, caller.key_name, caller.role == Role::admin, now);
  if (!record) {
    sink_.reply_error(client, m.header.id, record.error().code, record.error().message);
    return;
  }
  if (waiver) audit_waiver(caller, record->document, replaced, now);
  sink_.push(action::SaveRecord{*record});
  sink_.to_client(client, protocol::Ok{}, m.header.id);
}

// A waiver recorded, replacing another, or withdrawn: each its own audit line, naming the gate.
void CoordinatorCore::audit_waiver(const Caller& caller, const std::string& document,
                                   const std::optional<qualification::Waiver>& replaced, TimeMs now) {
  const auto stored = qualification::waiver_from_json(nlohmann::json::parse(document));
  KILN_ASSERT(stored.has_value(), "the record book stores checked waivers");
  const std::string gate = fmt::format("gate {} {}", stored->model, kiln::enum_name(stored->metric));
  const std::string what = fmt::format("{} ({}, team {})", qualification::waiver_text(*stored), stored->scope,
                                       stored->team);
  if (!stored->withdrawn_by.empty()) {
    context().audit(caller, "waiver_withdrawn", gate, "withdrew " + what);
  } else if (replaced) {
    const std::string earlier = qualification::in_force(*replaced, now)
                                    ? qualification::waiver_text(*replaced)
                                    : fmt::format("{} (no longer in force)", qualification::waiver_text(*replaced));
    context().audit(caller, "waiver_replaced", gate, fmt::format("{}, replacing {}", what, earlier));
  } else {
    context().audit(caller, "waiver", gate, what);
  }
}

// What a client did outside the coordinator (a release in the environments repository): the line
// names the caller's key and role and the coordinator's time, whatever the client says.
void CoordinatorCore::put_audit(const std::string& client, const Caller& caller, std::uint64_t corr,
                                const protocol::PutAudit& put) {
  const auto& actions = protocol::kClientAuditActions;
  if (std::find(std::begin(actions), std::end(actions), put.action) == std::end(actions)) {
    sink_.reply_error(client, corr, Errc::invalid_argument,
                      fmt::format("'{}' is not an action a client records; clients record {}", put.action,
                                  fmt::join(actions, ", ")));
    return;
  }
  context().audit(caller, put.action, put.subject, put.detail);
  sink_.to_client(client, protocol::Ok{}, corr);
}

// A ticket's state is a person's call (acknowledged by its team, fixed, a duplicate): every
// person's role may set it; the qualifier's ci key only files tickets.
void CoordinatorCore::set_ticket_state(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                                       const protocol::SetTicketState& request, TimeMs now) {
  if (caller.role == Role::ci) {
    sink_.reply_error(client, m.header.id, Errc::unauthorized,
                      fmt::format("role {} may not change a ticket's state; people do, with a developer, lab, ops or "
                                  "admin key",
                                  protocol::enum_name(caller.role)));
    return;
  }
  auto record = records_.set_ticket_state(request, caller.key_name, now);
  if (!record) {
    sink_.reply_error(client, m.header.id, record.error().code, record.error().message);
    return;
  }
  sink_.push(action::SaveRecord{*record});
  sink_.to_client(client, *record, m.header.id);
}

namespace {

std::string no_record(const protocol::GetRecord& get) {
  return fmt::format("no {} record '{}'; `kiln changes`, `kiln bundles`, `kiln runs` and `kiln tickets` list them",
                     protocol::enum_name(get.kind), get.key);
}

// Records read from the store for one page: the page's byte budget holds a few dozen run reports
// or about a thousand of the other kinds, so reading a client's whole limit (up to 10,000) would
// read what is not sent.
std::uint32_t stored_rows_per_page(protocol::RecordKind kind) {
  return kind == protocol::RecordKind::qualification_run || kind == protocol::RecordKind::stability_run ||
                 kind == protocol::RecordKind::model_run
             ? 100
             : 1000;
}

}  // namespace

void CoordinatorCore::get_record(const std::string& client, std::uint64_t corr, const protocol::GetRecord& get) {
  if (held_in_store_only(get.kind)) {
    sink_.push(action::ReadRecords{client, corr, get});
  } else if (const protocol::RecordEntry* record = records_.get(get.kind, get.key)) {
    sink_.to_client(client, *record, corr);
  } else {
    sink_.reply_error(client, corr, Errc::not_found, no_record(get));
  }
}

void CoordinatorCore::list_records(const std::string& client, std::uint64_t corr, const protocol::ListRecords& list) {
  if (held_in_memory(list.kind)) {
    sink_.to_client(client, records_.list(list), corr);
    return;
  }
  protocol::ListRecords read = list;
  read.limit = std::min(list.limit, stored_rows_per_page(list.kind)) + 1;  // one more says whether more follow
  sink_.push(action::ReadRecords{client, corr, read});
}

void CoordinatorCore::on_records_read(const action::ReadRecords& read,
                                      Result<std::vector<protocol::RecordEntry>> found) {
  if (!found) {
    const auto kind = std::visit([](const auto& query) { return query.kind; }, read.query);
    sink_.reply_error(read.client, read.corr, Errc::unavailable,
                      store_unreadable(fmt::format("{} records are", protocol::enum_name(kind)), found.error()));
    return;
  }
  if (const auto* get = std::get_if<protocol::GetRecord>(&read.query)) {
    if (found->empty()) {
      sink_.reply_error(read.client, read.corr, Errc::not_found, no_record(*get));
    } else {
      sink_.to_client(read.client, std::move(found->front()), read.corr);
    }
    return;
  }
  const auto& list = std::get<protocol::ListRecords>(read.query);
  const bool cut = found->size() >= list.limit;
  if (cut) found->resize(list.limit - 1);
  sink_.to_client(read.client, page_of(list, std::move(*found), cut), read.corr);
}

void CoordinatorCore::on_resumed(Now clock_now, DurationMs paused_ms) {
  const TimeMs now = clock_.advance(clock_now);
  // Longer than a liveness timeout, and the agents gave up on the coordinator and are in
  // reconnect backoff: they get the grace they get after a restart.
  const DurationMs window_ms = paused_ms > knobs_.liveness_timeout_ms()
                                   ? std::max<DurationMs>(knobs_.restart_grace_ms, knobs_.liveness_timeout_ms())
                                   : knobs_.liveness_timeout_ms();
  registry_.fresh_window(now + window_ms);
  sink_.log(action::Severity::warn,
            fmt::format("the coordinator's loop did not run for {} ms (stopped, starved or swapped out): no node is "
                        "lost in the next {} ms for its silence",
                        paused_ms, window_ms));
  jobs_.forget_ended(now);
}

void CoordinatorCore::on_tick(Now clock_now) {
  const TimeMs now = clock_.advance(clock_now);
  lose_silent_nodes(now);
  jobs_.time_out_overdue(now);
  jobs_.give_up_stopping(now);
  end_due_leases(now);
  jobs_.revoke_due(now);
  if (auto deadline = bridge_.scheduler().next_deadline(); deadline && bridge_.to_scheduler_time(now) >= *deadline) {
    bridge_.scheduler().on_tick(bridge_.to_scheduler_time(now));
  }
  leases_.answer_watches(now);
  job_watches_.answer_due(now);
  start_installs(rollouts_.advance(now, jobs_), now);
  pump(now);
  jobs_.forget_ended(now);
}

void CoordinatorCore::on_desired_environments(DesiredFleet fleet, Now clock_now) {
  const TimeMs now = clock_.advance(clock_now);
  start_installs(rollouts_.set_desired(std::move(fleet), now, jobs_), now);
  pump(now);
  jobs_.forget_ended(now);
}

}  // namespace kiln::coordinator
