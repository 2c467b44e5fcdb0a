// The coordinator in the simulation: its core, the shell's action interpreter over the simulated
// network and store, crashes and restarts from what the store holds.
#include "sim/cluster/world.h"

#include <limits>

#include "coordinator/core/job_retention.h"

namespace kiln::sim::cluster {

// The coordinator's actions are carried out by the real shell's interpreter over the
// simulated network and store (SimCoordinatorIo). A crash in the middle of a step halts
// the process after the chosen number of actions: it carries out nothing more. A failed save
// stops the coordinator as it stops the real one; its supervisor restarts it.
void Simulation::World::drain_coordinator() {
  if (!coordinator) return;
  const Status status = coordinator::carry_out_actions(*coordinator, coordinator_io);
  if (coordinator_halted) {
    coordinator_halted = false;
    log("sim", "coordinator crashes in the middle of a step");
    crash_coordinator_now(pending_crash_down_ms);
  } else if (!status) {
    log("sim", fmt::format("coordinator stops: the store failed: {}", status.error().message));
    crash_coordinator_now(store_failure_down_ms);
  }
}

// One action carried out: a mid-step crash may strike now.
void Simulation::World::coordinator_action_done() {
  if (crash_after_actions && --*crash_after_actions == 0) {
    crash_after_actions.reset();
    coordinator_halted = true;
  }
}

Status Simulation::World::coordinator_save(StoredKind kind, const std::function<void()>& store) {
  if (coordinator_halted) return kiln::fail(Errc::unavailable, "the coordinator process has died");
  auto planned = std::find_if(planned_store_failures.begin(), planned_store_failures.end(),
                              [&](const PlannedStoreFailure& f) { return f.kind == kind && now >= f.from; });
  if (planned != planned_store_failures.end()) {
    store_failure_down_ms = planned->down_ms;
    planned_store_failures.erase(planned);
    return kiln::fail(Errc::io, "disk I/O error (simulated)");
  }
  store();
  coordinator_action_done();
  return {};
}

void Simulation::World::coordinator_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) {
  if (coordinator_halted) return;
  const auto slash = peer.rfind('/');
  KILN_ASSERT(slash != std::string::npos, "simulated agent peers are node/connection");
  auto it = agent_by_node_id.find(peer.substr(0, slash));
  KILN_ASSERT(it != agent_by_node_id.end(), "the coordinator only knows peers the simulation created");
  const std::size_t node = it->second;
  if (const auto* ack = std::get_if<protocol::JobFinishedAck>(&body)) acks_this_step.emplace_back(node, *ack);
  const std::uint64_t connection = std::stoull(peer.substr(slash + 1));
  send(coordinator_endpoint(), Endpoint{Endpoint::Kind::agent, node, connection}, std::move(body),
       coordinator_next_message_id++, corr);
  coordinator_action_done();
}

void Simulation::World::coordinator_to_client(const std::string& client_key, protocol::Body body, std::uint64_t corr) {
  if (coordinator_halted) return;
  std::size_t client = clients.size();
  for (std::size_t i = 0; i < clients.size(); ++i) {
    if (clients[i].key_name == client_key) client = i;
  }
  KILN_ASSERT(client < clients.size(), "the coordinator only knows clients the simulation created");
  if (const auto* acc = std::get_if<protocol::JobAccepted>(&body)) {
    if (stored_jobs.count(acc->job_id) == 0) {
      fail(fmt::format("job {} was acknowledged to client {} before the store held it", acc->job_id, client_key));
    }
    accepted.insert(acc->job_id);
  }
  // A lease acknowledged to its developer survives a coordinator restart: stored first.
  std::uint64_t lease_acknowledged = 0;
  if (const auto* granted = std::get_if<protocol::LeaseGranted>(&body)) lease_acknowledged = granted->lease.lease_id;
  if (const auto* pending = std::get_if<protocol::LeasePending>(&body)) lease_acknowledged = pending->lease.lease_id;
  if (lease_acknowledged != 0 && stored_leases.count(lease_acknowledged) == 0) {
    fail(fmt::format("lease L{} was acknowledged to client {} before the store held it", lease_acknowledged,
                     client_key));
  }
  send(coordinator_endpoint(), Endpoint{Endpoint::Kind::client, client, 0}, std::move(body),
       coordinator_next_message_id++, corr);
  coordinator_action_done();
}

void Simulation::World::note_saved_job(const JobRecord& job) {
  const auto& s = job.summary;
  if (s.workload == protocol::kDiagWorkload && s.state == JobState::succeeded &&
      job.result.find("\"verdict\":\"pass\"") != std::string::npos) {
    diagnostics_passed.insert(job.requested_node_id);
  }
  stored_jobs[s.job_id] = job;
}

void Simulation::World::coordinator_log(const std::string& text) {
  if (coordinator_halted) return;
  log("coordinator", text);
  coordinator_action_done();
}

// What the store holds: what a restarted coordinator recovers.
coordinator::Snapshot Simulation::World::stored() const {
  coordinator::Snapshot snapshot;
  for (const auto& [id, node] : stored_nodes) snapshot.nodes.push_back(node);
  for (const auto& [id, job] : stored_jobs) snapshot.jobs.push_back(job);
  snapshot.jobs = coordinator::jobs_held_at_start(std::move(snapshot.jobs), options.coordinator_knobs.ended_jobs_in_memory,
                                                    std::numeric_limits<TimeMs>::min());
  for (const auto& [key, record] : stored_records) {
    snapshot.records.push_back(record);
    // As Store::load_live reads them: those held in the store only without their documents.
    if (coordinator::held_in_store_only(record.kind)) snapshot.records.back().document.clear();
  }
  for (const auto& [id, lease] : stored_leases) snapshot.leases.push_back(lease);
  return snapshot;
}

// A job_finished_ack tells the agent it may forget the result. By the end of the step (or
// the crash that cut it short) either the coordinator stored the result (the job is terminal
// in the store), or it gave that attempt up (requeued it, or the job ended another way);
// never "the same attempt, still active", which a restart would count as lost.
void Simulation::World::check_result_ack(std::size_t node, const protocol::JobFinishedAck& ack) {
  auto it = stored_jobs.find(ack.job_id);
  if (it == stored_jobs.end()) {
    fail(fmt::format("job {} attempt {}: a result was acknowledged to node {} for a job the store never held",
                     ack.job_id, ack.attempt, agents[node].identity.node_id));
    return;
  }
  const auto& s = it->second.summary;
  if (protocol::is_terminal(s.state)) {
    if (s.attempt == ack.attempt && s.node_id == agents[node].identity.node_id) {
      acked_results.emplace(ack.job_id, ack.attempt);
    }
    return;
  }
  if (s.state != JobState::queued && s.attempt == ack.attempt && s.node_id == agents[node].identity.node_id) {
    fail(fmt::format("job {} attempt {}: its result was acknowledged to node {} but the store still holds it as {}",
                     ack.job_id, ack.attempt, s.node_id, protocol::enum_name(s.state)));
  }
}

void Simulation::World::crash_coordinator_now(DurationMs down_ms) {
  if (!coordinator) return;
  coordinator.reset();
  coordinator_tick_at.reset();
  crash_after_actions.reset();
  ++coordinator_incarnation;  // what is in flight to the old process is lost with it
  // Its connections close with it: each agent's transport reports the drop.
  for (SimAgent& a : agents) {
    if (a.core) a.core->on_connection_lost();
  }
  ++counters.coordinator_crashes;
  log("sim", fmt::format("coordinator crashed; restarts in {} ms", down_ms));
  schedule(down_ms, ev::CoordinatorRestart{});
}

void Simulation::World::restart_coordinator() {
  if (coordinator) return;
  coordinator::Snapshot snapshot = stored();
  log("sim", fmt::format("coordinator restarts from the store ({} nodes, {} jobs, {} leases)", snapshot.nodes.size(),
                         snapshot.jobs.size(), snapshot.leases.size()));
  coordinator = std::make_unique<CoordinatorCore>(options.coordinator_knobs, std::move(snapshot), wall());
  coordinator_started_at = now;
  drain_coordinator();
  // The real shell's first loop turn ticks at once: overdue work is handled on start-up.
  if (coordinator) coordinator->on_tick(wall());
  drain_coordinator();
}

}  // namespace kiln::sim::cluster
