#include "sim/cluster/cluster_sim.h"

#include "sim/cluster/world.h"

namespace kiln::sim::cluster {

// ---- options ---------------------------------------------------------------------------------

SimOptions options_from_seed(std::uint64_t seed, DurationMs fault_period_ms) {
  SimOptions o;
  o.seed = seed;
  o.fault_period_ms = fault_period_ms;

  Rng shape(stats::derive_seed(seed, kShapeOptionsStream));
  o.shape.nodes = 2 + shape.below(7);
  const std::size_t revision_count = 1 + shape.below(std::min<std::size_t>(3, o.shape.nodes));
  for (std::size_t i = 0; i < o.shape.nodes; ++i) o.shape.revisions.push_back(std::string(1, char('a' + i % revision_count)));
  o.shape.numa_nodes = shape.bernoulli(0.5) ? 1 : 2;
  // Knobs pushed around their defaults, toward the aggressive end.
  o.coordinator_knobs.heartbeat_interval_ms = static_cast<std::uint32_t>(between(shape, 200, 1000));
  o.coordinator_knobs.liveness_missed_beats = static_cast<std::uint32_t>(between(shape, 3, 5));
  o.coordinator_knobs.job_timeout_slack_ms = static_cast<std::uint32_t>(between(shape, 2000, 30000));
  o.agent_knobs.heartbeat_interval_ms = o.coordinator_knobs.heartbeat_interval_ms;
  o.agent_knobs.liveness_missed_beats = o.coordinator_knobs.liveness_missed_beats;
  o.agent_knobs.reconnect_backoff_initial_ms = between(shape, 100, 1000);
  o.agent_knobs.reconnect_backoff_max_ms = between(shape, o.agent_knobs.reconnect_backoff_initial_ms, 30000);
  o.agent_knobs.probe_interval_ms = between(shape, 5000, 60000);
  // Preemption within a simulated few minutes: short grace, short start targets for CI.
  auto& sched = o.coordinator_knobs.scheduler;
  sched.grace_ms = between(shape, 2000, 60000);
  sched.target_start_latency_ms[1] = between(shape, 5000, 120000);  // presubmit
  sched.target_start_latency_ms[2] = between(shape, 10000, 240000);  // bisect
  // Few ended jobs held, so that jobs are let go and recalled from the store under faults.
  o.coordinator_knobs.ended_jobs_in_memory = between(shape, 1, 40);

  Rng faults(stats::derive_seed(seed, kFaultOptionsStream));
  // One seed in ten runs without faults: the plain path must hold its invariants too.
  if (!faults.bernoulli(0.1)) {
    auto& f = o.faults;
    f.network.delay_max_ms = between(faults, 1, 300);
    f.network.loss_probability = faults.bernoulli(0.7) ? faults.uniform(0, 0.05) : 0.0;
    f.network.duplicate_probability = faults.bernoulli(0.5) ? faults.uniform(0, 0.05) : 0.0;
    f.network.preserve_order = faults.bernoulli(0.75);
    f.agent_crashes_per_minute = faults.bernoulli(0.7) ? faults.uniform(0, 1.5) : 0.0;
    f.coordinator_crashes_per_minute = faults.bernoulli(0.5) ? faults.uniform(0, 0.5) : 0.0;
    f.partitions_per_minute = faults.bernoulli(0.7) ? faults.uniform(0, 1.5) : 0.0;
    f.agent_down_max_ms = between(faults, 2000, 30000);
    f.coordinator_down_max_ms = between(faults, 1000, 20000);
    f.partition_max_ms = between(faults, 2000, 40000);
    f.node_faults_per_minute = faults.bernoulli(0.5) ? faults.uniform(0, 0.5) : 0.0;
    f.node_fault_max_ms = between(faults, 5000, 90000);
  }

  Rng workload(stats::derive_seed(seed, kWorkloadOptionsStream));
  auto& w = o.workload;
  w.clients = 1 + workload.below(4);
  w.submits_per_minute = workload.uniform(2, 20);
  w.cancel_probability = workload.uniform(0, 0.15);
  w.job_failure_probability = workload.uniform(0, 0.2);
  w.job_overrun_probability = workload.uniform(0, 0.1);
  w.job_duration_min_ms = between(workload, 500, 5000);
  w.job_duration_max_ms = between(workload, 10000, 180000);
  w.lease_requests_per_minute = workload.bernoulli(0.5) ? workload.uniform(0, 2) : 0.0;
  w.preempt_checkpoint_probability = workload.uniform(0.5, 1.0);
  w.run_reports_per_minute = workload.uniform(0.5, 4);
  return o;
}

std::string Violation::describe() const {
  return fmt::format("seed {} failed at step {} (t={} ms): {}; reproduce with kiln-sim-sweep --seed={} --minutes={}",
                     seed, step, time_ms, invariant, seed,
                     static_cast<double>(fault_period_ms) / static_cast<double>(kMinuteMs));
}

std::string RunSummary::describe() const {
  std::string text = fmt::format(
      "seed {}: {} steps, {:.1f} simulated min, {} nodes; jobs {} submitted, {} succeeded, {} failed, {} cancelled, "
      "{} lost; {} leases; {} preemption notices; faults: {} agent crashes, {} coordinator crashes, {} partitions, "
      "{} node faults; messages {} sent, {} dropped, {} duplicated; {} physical chip overlaps; log digest {:016x}",
      seed, steps, static_cast<double>(simulated_ms) / static_cast<double>(kMinuteMs), nodes, jobs_submitted,
      jobs_succeeded, jobs_failed, jobs_cancelled, jobs_lost, leases_requested, preemption_notices, agent_crashes,
      coordinator_crashes, partitions, node_faults, messages_sent, messages_dropped, messages_duplicated, physical_chip_overlaps, log_digest);
  if (violation) text += "\n  VIOLATION " + violation->describe();
  return text;
}

// ---- the world -------------------------------------------------------------------------------


Simulation::World::World(SimOptions o)
    : options(std::move(o)),
      network_rng(stats::derive_seed(options.seed, kNetworkStream)),
      fault_rng(stats::derive_seed(options.seed, kFaultScheduleStream)),
      workload_rng(stats::derive_seed(options.seed, kWorkloadStream)),
      process_rng(stats::derive_seed(options.seed, kProcessStream)),
      report_rng(stats::derive_seed(options.seed, kReportStream)) {
  KILN_ASSERT(options.shape.nodes >= 1 && options.shape.revisions.size() == options.shape.nodes,
              "the cluster shape names one hardware revision per node");
  KILN_ASSERT(options.workload.clients >= 1, "a simulation has at least one client");
  counters.seed = options.seed;
  counters.nodes = options.shape.nodes;
  for (std::size_t i = 0; i < options.shape.nodes; ++i) {
    SimAgent a;
    a.identity.node_id = fmt::format("n{:02}", i + 1);
    a.identity.hardware_revision = options.shape.revisions[i];
    a.identity.agent_version = "0.1.0-sim";
    a.identity.driver_version = "sim-1";
    const std::uint32_t per_numa = std::max<std::uint32_t>(1, options.shape.chips_per_node / options.shape.numa_nodes);
    for (std::uint32_t c = 0; c < options.shape.chips_per_node; ++c) {
      a.identity.chips.push_back(
          protocol::ChipInfo{c, fmt::format("{}-c{}", a.identity.node_id, c), "fw-1", c / per_numa, true});
    }
    a.identity.host = protocol::HostInfo{a.identity.node_id + ".sim", options.shape.numa_nodes, 64, 16};
    a.identity.workloads = cluster_workloads();
    agent_by_node_id[a.identity.node_id] = i;
    agents.push_back(std::move(a));
  }
  static const std::vector<std::pair<std::string, protocol::Role>> kClientKinds = {
      {"ci", protocol::Role::ci}, {"dev", protocol::Role::developer}, {"ops", protocol::Role::ops}};
  for (std::size_t i = 0; i < options.workload.clients; ++i) {
    const auto& [prefix, role] = kClientKinds[i % kClientKinds.size()];
    clients.push_back(SimClient{fmt::format("{}-{}", prefix, i), role, 1});
  }
  lab_client = clients.size();
  clients.push_back(SimClient{"lab", protocol::Role::lab, 1});

  coordinator = std::make_unique<CoordinatorCore>(options.coordinator_knobs, coordinator::Snapshot{}, wall());
  coordinator_started_at = now;
  drain_coordinator();
  for (std::size_t i = 0; i < agents.size(); ++i) start_agent(i);
  if (options.workload.submits_per_minute > 0) {
    schedule(exponential_ms(workload_rng, options.workload.submits_per_minute), ev::NextSubmission{});
  }
  if (options.workload.lease_requests_per_minute > 0 && developer_client()) {
    schedule(exponential_ms(workload_rng, options.workload.lease_requests_per_minute), ev::NextLeaseRequest{});
  }
  if (options.workload.run_reports_per_minute > 0) {
    schedule(exponential_ms(report_rng, options.workload.run_reports_per_minute), ev::NextRunReport{});
  }
  schedule(options.workload.lab_round_ms, ev::LabRound{});
  schedule_next_fault();
  refresh_ticks();
}

void Simulation::World::refresh_ticks() {
  if (coordinator) {
    if (auto deadline = coordinator->next_deadline()) {
      const TimeMs at = std::max(*deadline - options.start_wall_ms, now + 1);
      if (!coordinator_tick_at || at < *coordinator_tick_at) {
        coordinator_tick_at = at;
        schedule_at(at, ev::CoordinatorTick{});
      }
    }
  }
  for (std::size_t i = 0; i < agents.size(); ++i) {
    SimAgent& a = agents[i];
    if (!a.core) continue;
    if (auto deadline = a.core->next_deadline()) {
      const TimeMs at = std::max(*deadline - options.start_wall_ms, now + 1);
      if (!a.tick_at || at < *a.tick_at) {
        a.tick_at = at;
        schedule_at(at, ev::AgentTick{i});
      }
    }
  }
}

void Simulation::World::step() {
  auto it = queue.begin();
  now = it->first.first;
  Event event = std::move(it->second);
  queue.erase(it);
  ++steps;
  std::visit([&](auto& e) { handle(e); }, event);
  refresh_ticks();
  check_invariants();
}

void Simulation::World::run_until(TimeMs until) {
  while (!violation && !queue.empty() && queue.begin()->first.first <= until) step();
  if (!violation) now = std::max(now, until);
}

// How long the quiet tail may take: quiet_tail_max_ms, plus twice the time the whole cluster
// needs to run the work still outstanding (each unfinished job's run time on its chips, each
// live lease's duration on its chips). A backlog cannot drain faster than that, whatever the
// cores do; the factor two covers chips left idle by placement and work lost to preemption.
DurationMs Simulation::World::quiet_tail_allowance_ms() const {
  std::int64_t backlog_chip_ms = 0;
  for (const auto& [id, job] : stored_jobs) {
    if (protocol::is_terminal(job.summary.state)) continue;
    DurationMs run_ms = 1000;  // start_process's default
    if (auto v = arg_value(job.summary.args, "sim.duration_ms")) run_ms = std::stoll(*v);
    if (job.summary.workload == protocol::kDiagWorkload) run_ms = 20000;
    run_ms = std::min<DurationMs>(run_ms, job.timeout_ms);
    backlog_chip_ms += static_cast<std::int64_t>(job.summary.chips) * run_ms;
  }
  if (coordinator) {
    for (const auto& lease : coordinator->leases()) {
      if (lease.state == protocol::LeaseState::ended) continue;
      backlog_chip_ms += static_cast<std::int64_t>(lease.chips) * static_cast<std::int64_t>(lease.duration_ms);
    }
  }
  const auto chips = static_cast<std::int64_t>(agents.size() * options.shape.chips_per_node);
  return options.quiet_tail_max_ms + 2 * backlog_chip_ms / std::max<std::int64_t>(1, chips);
}

void Simulation::World::run_quiet_tail() {
  if (violation) return;
  quiet = true;
  crash_after_actions.reset();
  for (auto& a : agents) {
    a.partitioned_until = std::min(a.partitioned_until, now);
    a.faulty_until = std::min(a.faulty_until, now);
  }
  const DurationMs allowed_ms = quiet_tail_allowance_ms();
  log("sim", fmt::format("faults stop: the quiet tail begins; every job and lease is to end within {} ms",
                         allowed_ms));
  const TimeMs deadline = now + allowed_ms;
  while (!violation && !queue.empty() && queue.begin()->first.first <= deadline) {
    if (all_jobs_terminal()) break;
    step();
  }
  if (violation || all_jobs_terminal()) return;
  now = std::max(now, deadline);
  if (!coordinator) return fail("the coordinator is still down after the quiet tail");
  for (const auto& [id, job] : coordinator->jobs()) {
    if (!protocol::is_terminal(job.summary.state)) {
      return fail(fmt::format("job {} is still {} (node '{}', attempt {} of {}) {} ms after faults stopped", id,
                              protocol::enum_name(job.summary.state), job.summary.node_id, job.summary.attempt,
                              job.summary.max_attempts, allowed_ms));
    }
  }
  for (const auto& [id, job] : stored_jobs) {
    if (!protocol::is_terminal(job.summary.state)) {
      return fail(fmt::format("the store still holds job {} as {} {} ms after faults stopped", id,
                              protocol::enum_name(job.summary.state), allowed_ms));
    }
  }
  for (const auto& lease : coordinator->leases()) {
    if (lease.state != protocol::LeaseState::ended) {
      return fail(fmt::format("lease L{} is still {} {} ms after faults stopped", lease.lease_id,
                              protocol::enum_name(lease.state), allowed_ms));
    }
  }
}

RunSummary Simulation::World::summary() const {
  RunSummary s = counters;
  s.steps = steps;
  s.simulated_ms = now;
  s.log_digest = log_digest;
  s.violation = violation;
  s.jobs_submitted = accepted.size();
  for (const auto& [id, job] : stored_jobs) {
    switch (job.summary.state) {
      case JobState::succeeded: ++s.jobs_succeeded; break;
      case JobState::failed:
      case JobState::timed_out: ++s.jobs_failed; break;
      case JobState::cancelled: ++s.jobs_cancelled; break;
      case JobState::lost: ++s.jobs_lost; break;
      default: break;
    }
  }
  return s;
}

// ---- the public face ---------------------------------------------------------------------------

Simulation::Simulation(SimOptions options) : world_(std::make_unique<World>(std::move(options))) {}
Simulation::~Simulation() = default;

RunSummary Simulation::run() {
  world_->run_until(world_->options.fault_period_ms);
  world_->run_quiet_tail();
  return world_->summary();
}

void Simulation::run_until(TimeMs until) { world_->run_until(until); }
void Simulation::run_quiet_tail() { world_->run_quiet_tail(); }

void Simulation::submit(TimeMs at, std::size_t client, protocol::SubmitJob job) {
  KILN_ASSERT(client < world_->clients.size(), "submit names a client of the simulation");
  world_->schedule_at(at, ev::ClientSubmit{client, std::move(job)});
}

void Simulation::cancel(TimeMs at, std::size_t client, std::uint64_t job_id) {
  KILN_ASSERT(client < world_->clients.size(), "cancel names a client of the simulation");
  world_->schedule_at(at, ev::ClientCancel{client, job_id});
}

void Simulation::crash_coordinator(TimeMs at, DurationMs down_ms) {
  world_->schedule_at(at, ev::CoordinatorCrash{down_ms, false});
}

void Simulation::crash_agent(TimeMs at, std::size_t node, DurationMs down_ms) {
  KILN_ASSERT(node < world_->agents.size(), "crash_agent names a node of the simulation");
  world_->schedule_at(at, ev::AgentCrash{node, down_ms});
}

void Simulation::partition(TimeMs at, std::size_t node, DurationMs duration_ms) {
  KILN_ASSERT(node < world_->agents.size(), "partition names a node of the simulation");
  world_->schedule_at(at, ev::PartitionStart{node, duration_ms});
}

void Simulation::node_fault(TimeMs at, std::size_t node, DurationMs duration_ms) {
  KILN_ASSERT(node < world_->agents.size(), "node_fault names a node of the simulation");
  world_->schedule_at(at, ev::NodeFault{node, duration_ms});
}

std::size_t Simulation::clients() const { return world_->clients.size(); }

void Simulation::client_send(TimeMs at, std::size_t client, protocol::Body body) {
  KILN_ASSERT(client < world_->clients.size(), "client_send names a client of the simulation");
  world_->schedule_at(at, ev::ClientSend{client, std::move(body)});
}

void Simulation::fail_next_save(TimeMs from, StoredKind kind, DurationMs down_ms) {
  world_->planned_store_failures.push_back(World::PlannedStoreFailure{from, kind, down_ms});
}

void Simulation::drop_next_from_agent(TimeMs from, std::size_t node, std::string type) {
  KILN_ASSERT(node < world_->agents.size(), "drop_next_from_agent names a node of the simulation");
  world_->planned_drops.push_back(World::PlannedDrop{from, node, std::move(type)});
}

TimeMs Simulation::now() const { return world_->now; }
const std::optional<Violation>& Simulation::violation() const { return world_->violation; }
RunSummary Simulation::summary() const { return world_->summary(); }
const std::vector<std::string>& Simulation::log() const { return world_->log_lines; }
const coordinator::CoordinatorCore* Simulation::coordinator() const { return world_->coordinator.get(); }

coordinator::Snapshot Simulation::store() const {
  return world_->stored();
}

std::vector<std::uint64_t> Simulation::accepted_jobs() const {
  return {world_->accepted.begin(), world_->accepted.end()};
}

std::size_t Simulation::acknowledged_results() const { return world_->acked_results.size(); }
std::string Simulation::node_id(std::size_t node) const { return world_->agents.at(node).identity.node_id; }
const SimOptions& Simulation::options() const { return world_->options; }

RunSummary run_seed(std::uint64_t seed, DurationMs fault_period_ms, bool record_log, std::vector<std::string>* log) {
  SimOptions options = options_from_seed(seed, fault_period_ms);
  options.record_log = record_log;
  Simulation simulation(std::move(options));
  RunSummary summary = simulation.run();
  if (log) *log = simulation.log();
  return summary;
}

}  // namespace kiln::sim::cluster
