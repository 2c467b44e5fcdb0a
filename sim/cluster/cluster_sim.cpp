#include "sim/cluster/cluster_sim.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <variant>

#include <fmt/format.h>

#include "common/exhaustive.h"
#include "common/protocol/codec.h"
#include "common/stats/rng.h"
#include "coordinator/shell/action_interpreter.h"

namespace kiln::sim::cluster {

namespace {

using coordinator::CoordinatorCore;
using coordinator::JobRecord;
using coordinator::NodeRecord;
using protocol::JobState;
using stats::Rng;

// Sub-seed streams. Options drawn from a seed use their own streams, so changing how a run
// behaves (network, schedule, workload, processes) never changes the cluster it runs on.
enum Stream : std::uint64_t {
  kNetworkStream = 1,
  kFaultScheduleStream = 2,
  kWorkloadStream = 3,
  kProcessStream = 4,
  kShapeOptionsStream = 11,
  kFaultOptionsStream = 12,
  kWorkloadOptionsStream = 13,
};

DurationMs between(Rng& rng, DurationMs low, DurationMs high) {
  if (high <= low) return low;
  return low + static_cast<DurationMs>(rng.below(static_cast<std::uint64_t>(high - low + 1)));
}

// Exponential inter-arrival time for a rate per minute, at least 1 ms.
DurationMs exponential_ms(Rng& rng, double per_minute) {
  const double mean_ms = static_cast<double>(kMinuteMs) / per_minute;
  return std::max<DurationMs>(1, static_cast<DurationMs>(-std::log(1.0 - rng.uniform01()) * mean_ms));
}

template <class T>
const T& pick(Rng& rng, const std::vector<T>& values) {
  return values[rng.below(values.size())];
}

constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
constexpr std::uint64_t kFnvPrime = 1099511628211ull;

struct Endpoint {
  enum class Kind { coordinator, agent, client };
  Kind kind = Kind::coordinator;
  std::size_t index = 0;
  // Agents: the connection the message belongs to. Coordinator: its incarnation.
  std::uint64_t connection = 0;
};

struct Packet {
  Endpoint from;
  Endpoint to;
  std::string type;
  protocol::Frames frames;      // with round_trip_codec
  protocol::Envelope envelope;  // without
};

namespace ev {
struct Deliver {
  Packet packet;
};
struct CoordinatorTick {};
struct AgentTick {
  std::size_t node = 0;
};
struct ProcessEnd {
  std::size_t node = 0;
  std::uint64_t process_id = 0;
};
struct CoordinatorCrash {
  DurationMs down_ms = 0;
  bool mid_step = false;
};
struct CoordinatorRestart {};
struct AgentCrash {
  std::size_t node = 0;
  DurationMs down_ms = 0;
};
struct AgentRestart {
  std::size_t node = 0;
};
struct PartitionStart {
  std::size_t node = 0;
  DurationMs duration_ms = 0;
};
struct ClientSubmit {
  std::size_t client = 0;
  protocol::SubmitJob job;
};
struct ClientCancel {
  std::size_t client = 0;
  std::uint64_t job_id = 0;
};
struct NodeFault {
  std::size_t node = 0;
  DurationMs duration_ms = 0;
};
// The probe reads the chips when it starts and reports when it ends, up to seconds later.
struct ProbeDone {
  std::size_t node = 0;
  std::uint64_t incarnation = 0;
  bool faulty = false;
  TimeMs measured_at_wall_ms = 0;
};
struct ClientRequestLease {
  std::size_t client = 0;
};
struct ClientReleaseLease {
  std::size_t client = 0;
  std::uint64_t lease_id = 0;
};
struct ClientSubmitInLease {
  std::size_t client = 0;
  std::uint64_t lease_id = 0;
  std::uint32_t chips = 1;
};
// Anything a scenario has a client say.
struct ClientSend {
  std::size_t client = 0;
  protocol::Body body;
};
struct NextSubmission {};
struct NextLeaseRequest {};
struct NextFault {};
struct LabRound {};
}  // namespace ev

using Event = std::variant<ev::Deliver, ev::CoordinatorTick, ev::AgentTick, ev::ProcessEnd, ev::CoordinatorCrash,
                           ev::CoordinatorRestart, ev::AgentCrash, ev::AgentRestart, ev::PartitionStart,
                           ev::ClientSubmit, ev::ClientCancel, ev::NodeFault, ev::ProbeDone, ev::ClientRequestLease,
                           ev::ClientReleaseLease, ev::ClientSubmitInLease, ev::ClientSend, ev::NextSubmission,
                           ev::NextLeaseRequest,
                           ev::NextFault, ev::LabRound>;

// A job's process on a simulated node: it runs for the duration its submitter put in its
// args ("sim.duration_ms=N"), or until its timeout, or until cancelled.
struct Process {
  std::uint64_t process_id = 0;
  std::uint64_t job_id = 0;
  std::vector<std::uint32_t> chips;
  TimeMs started_ms = 0;
  TimeMs natural_end_ms = 0;
  protocol::JobOutcome natural_outcome = protocol::JobOutcome::succeeded;
  bool diagnostics = false;  // kiln.diag: its result says whether the node passed
  std::uint32_t diagnostics_level = 1;  // its --level argument
  bool cancelling = false;
  bool checkpointing = false;  // told it is preempted, it checkpoints and exits
};

struct SimAgent {
  agent::AgentIdentity identity;
  std::unique_ptr<agent::AgentCore> core;  // null while crashed
  std::uint64_t incarnation = 0;
  std::uint64_t connection = 0;            // never reused, across restarts too
  std::optional<TimeMs> tick_at;
  std::map<std::uint64_t, Process> processes;  // by job id
  std::uint64_t next_message_id = 1;
  TimeMs last_heard_by_coordinator = 0;
  TimeMs partitioned_until = 0;
  TimeMs faulty_until = 0;           // a node fault: probes, diagnostics and jobs fail
  TimeMs diagnostics_submitted_at = -1;  // by the lab client; -1: never
};

struct SimClient {
  std::string key_name;
  protocol::Role role = protocol::Role::ci;
  std::uint64_t next_message_id = 1;
};

std::optional<std::string> arg_value(const std::vector<std::string>& args, std::string_view key) {
  for (const auto& arg : args) {
    if (arg.size() > key.size() && arg.compare(0, key.size(), key) == 0 && arg[key.size()] == '=') {
      return arg.substr(key.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

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

struct Simulation::World {
  SimOptions options;
  Rng network_rng;
  Rng fault_rng;
  Rng workload_rng;
  Rng process_rng;

  TimeMs now = 0;
  std::uint64_t steps = 0;
  std::uint64_t next_sequence = 0;
  std::map<std::pair<TimeMs, std::uint64_t>, Event> queue;
  bool quiet = false;  // the quiet tail: no new faults, submissions, loss or duplication
  std::optional<Violation> violation;
  std::vector<std::string> log_lines;
  std::uint64_t log_digest = kFnvOffset;
  RunSummary counters;

  // Coordinator and its store.
  std::unique_ptr<CoordinatorCore> coordinator;
  std::uint64_t coordinator_incarnation = 1;
  TimeMs coordinator_started_at = 0;
  std::optional<TimeMs> coordinator_tick_at;
  std::optional<std::size_t> crash_after_actions;  // a mid-step crash waiting to strike
  DurationMs pending_crash_down_ms = 0;
  std::uint64_t coordinator_next_message_id = 1;
  std::map<std::string, NodeRecord> stored_nodes;
  std::map<std::uint64_t, JobRecord> stored_jobs;
  std::map<std::pair<protocol::RecordKind, std::string>, protocol::RecordEntry> stored_records;
  std::map<std::uint64_t, coordinator::LeaseRecord> stored_leases;
  std::set<std::uint64_t> accepted;                                // job_accepted sent
  std::set<std::pair<std::uint64_t, std::uint32_t>> acked_results;  // (job, attempt) acknowledged, stored terminal
  std::vector<std::pair<std::size_t, protocol::JobFinishedAck>> acks_this_step;  // (node, ack)
  std::set<std::string> in_quarantine;        // nodes seen quarantined, not yet released
  std::set<std::string> diagnostics_passed;   // nodes whose diagnostics passed since

  std::vector<SimAgent> agents;
  std::map<std::string, std::size_t> agent_by_node_id;
  std::vector<SimClient> clients;
  std::size_t lab_client = 0;
  std::uint64_t next_process_id = 1;
  std::map<std::string, TimeMs> link_last_delivery;
  struct PlannedDrop {
    TimeMs from = 0;
    std::size_t node = 0;
    std::string type;
  };
  std::vector<PlannedDrop> planned_drops;  // drop_next_from_agent
  struct PlannedStoreFailure {
    TimeMs from = 0;
    StoredKind kind = StoredKind::job;
    DurationMs down_ms = 0;
  };
  std::vector<PlannedStoreFailure> planned_store_failures;  // fail_next_save
  DurationMs store_failure_down_ms = 0;
  bool coordinator_halted = false;  // struck by a mid-step crash; the step is not over yet

  // What the coordinator's shell does in the simulation: the simulated network and store.
  struct SimCoordinatorIo final : coordinator::CoordinatorIo {
    World& world;
    explicit SimCoordinatorIo(World& w) : world(w) {}
    void send_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) override {
      world.coordinator_to_agent(peer, std::move(body), corr);
    }
    void send_to_client(const std::string& client, protocol::Body body, std::uint64_t corr) override {
      world.coordinator_to_client(client, std::move(body), corr);
    }
    Status save_node(const NodeRecord& node) override {
      return world.coordinator_save(StoredKind::node, [&] { world.stored_nodes[node.summary.node_id] = node; });
    }
    Status save_job(const JobRecord& job) override {
      return world.coordinator_save(StoredKind::job, [&] { world.note_saved_job(job); });
    }
    Status save_record(const protocol::RecordEntry& record) override {
      return world.coordinator_save(StoredKind::record,
                                    [&] { world.stored_records[{record.kind, record.key}] = record; });
    }
    Status save_lease(const coordinator::LeaseRecord& lease) override {
      return world.coordinator_save(StoredKind::lease,
                                    [&] { world.stored_leases[lease.summary.lease_id] = lease; });
    }
    void log(coordinator::action::Severity, const std::string& text) override { world.coordinator_log(text); }
  };
  SimCoordinatorIo coordinator_io{*this};
  protocol::CodecLimits coordinator_limits;

  explicit World(SimOptions o)
      : options(std::move(o)),
        network_rng(stats::derive_seed(options.seed, kNetworkStream)),
        fault_rng(stats::derive_seed(options.seed, kFaultScheduleStream)),
        workload_rng(stats::derive_seed(options.seed, kWorkloadStream)),
        process_rng(stats::derive_seed(options.seed, kProcessStream)) {
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
    schedule(options.workload.lab_round_ms, ev::LabRound{});
    schedule_next_fault();
    refresh_ticks();
  }

  TimeMs wall() const { return options.start_wall_ms + now; }

  std::optional<std::size_t> developer_client() const {
    for (std::size_t i = 0; i < clients.size(); ++i) {
      if (clients[i].role == protocol::Role::developer) return i;
    }
    return std::nullopt;
  }

  bool faulty(std::size_t node) const { return now < agents[node].faulty_until; }

  // ---- plumbing ----

  void schedule(DurationMs delay_ms, Event event) { schedule_at(now + std::max<DurationMs>(0, delay_ms), std::move(event)); }
  void schedule_at(TimeMs at, Event event) { queue.emplace(std::make_pair(at, next_sequence++), std::move(event)); }

  void log(const std::string& source, const std::string& text) {
    std::string line = fmt::format("{:>10} {:<12} {}", now, source, text);
    for (unsigned char c : line) log_digest = (log_digest ^ c) * kFnvPrime;
    log_digest = (log_digest ^ '\n') * kFnvPrime;
    if (options.record_log) log_lines.push_back(std::move(line));
  }

  void fail(std::string invariant) {
    if (violation) return;
    violation = Violation{options.seed, options.fault_period_ms, steps, now, std::move(invariant)};
    log("sim", "VIOLATION " + violation->invariant);
  }

  std::string endpoint_name(const Endpoint& e) const {
    switch (e.kind) {
      case Endpoint::Kind::coordinator: return "coordinator";
      case Endpoint::Kind::agent: return agents[e.index].identity.node_id;
      case Endpoint::Kind::client: return clients[e.index].key_name;
    }
    return "?";
  }

  std::string link_key(const Endpoint& from, const Endpoint& to) const {
    return fmt::format("{}/{}>{}/{}", endpoint_name(from), from.connection, endpoint_name(to), to.connection);
  }

  bool partitioned(const Endpoint& a, const Endpoint& b) const {
    for (const Endpoint* e : {&a, &b}) {
      if (e->kind == Endpoint::Kind::agent && now < agents[e->index].partitioned_until) return true;
    }
    return false;
  }

  void send(Endpoint from, Endpoint to, protocol::Body body, std::uint64_t id, std::uint64_t corr) {
    ++counters.messages_sent;
    Packet packet;
    packet.from = from;
    packet.to = to;
    packet.type = std::string(protocol::type_name(body));
    packet.envelope = protocol::make_envelope(std::move(body), id, corr);
    if (options.faults.network.round_trip_codec) {
      auto frames = protocol::encode(packet.envelope);
      if (!frames) {
        fail(fmt::format("the codec refused a {} from {} to {}: {}", packet.type, endpoint_name(from),
                         endpoint_name(to), frames.error().describe()));
        return;
      }
      packet.frames = std::move(*frames);
      packet.envelope = protocol::Envelope{};
    }
    const NetworkFaults& net = options.faults.network;
    auto planned = std::find_if(planned_drops.begin(), planned_drops.end(), [&](const PlannedDrop& d) {
      return from.kind == Endpoint::Kind::agent && from.index == d.node && now >= d.from && packet.type == d.type;
    });
    if (planned != planned_drops.end()) {
      planned_drops.erase(planned);
      ++counters.messages_dropped;
      log("sim", fmt::format("the network loses a {} from {}", packet.type, endpoint_name(from)));
      return;
    }
    if (partitioned(from, to) || (!quiet && network_rng.bernoulli(net.loss_probability))) {
      ++counters.messages_dropped;
      return;
    }
    int copies = 1;
    if (std::find(net.always_duplicate_types.begin(), net.always_duplicate_types.end(), packet.type) !=
            net.always_duplicate_types.end() ||
        (!quiet && network_rng.bernoulli(net.duplicate_probability))) {
      copies = 2;
      ++counters.messages_duplicated;
    }
    for (int i = 0; i < copies; ++i) {
      TimeMs at = now + between(network_rng, net.delay_min_ms, net.delay_max_ms);
      if (net.preserve_order) {
        TimeMs& last = link_last_delivery[link_key(from, to)];
        at = std::max(at, last);
        last = at;
      }
      schedule_at(at, ev::Deliver{packet});
    }
  }

  Endpoint coordinator_endpoint() const {
    return Endpoint{Endpoint::Kind::coordinator, 0, coordinator_incarnation};
  }

  // ---- coordinator ----

  // The coordinator's actions are carried out by the real shell's interpreter over the
  // simulated network and store (SimCoordinatorIo). A crash in the middle of a step halts
  // the process after the chosen number of actions: it carries out nothing more. A failed save
  // stops the coordinator as it stops the real one; its supervisor restarts it.
  void drain_coordinator() {
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
  void coordinator_action_done() {
    if (crash_after_actions && --*crash_after_actions == 0) {
      crash_after_actions.reset();
      coordinator_halted = true;
    }
  }

  Status coordinator_save(StoredKind kind, const std::function<void()>& store) {
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

  void coordinator_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) {
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

  void coordinator_to_client(const std::string& client_key, protocol::Body body, std::uint64_t corr) {
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

  void note_saved_job(const JobRecord& job) {
    const auto& s = job.summary;
    if (s.workload == protocol::kDiagWorkload && s.state == JobState::succeeded &&
        job.result.find("\"verdict\":\"pass\"") != std::string::npos) {
      diagnostics_passed.insert(job.requested_node_id);
    }
    stored_jobs[s.job_id] = job;
  }

  void coordinator_log(const std::string& text) {
    if (coordinator_halted) return;
    log("coordinator", text);
    coordinator_action_done();
  }

  // What the store holds: what a restarted coordinator recovers.
  coordinator::Snapshot stored() const {
    coordinator::Snapshot snapshot;
    for (const auto& [id, node] : stored_nodes) snapshot.nodes.push_back(node);
    for (const auto& [id, job] : stored_jobs) snapshot.jobs.push_back(job);
    for (const auto& [key, record] : stored_records) snapshot.records.push_back(record);
    for (const auto& [id, lease] : stored_leases) snapshot.leases.push_back(lease);
    return snapshot;
  }

  // A job_finished_ack tells the agent it may forget the result. By the end of the step (or
  // the crash that cut it short) either the coordinator stored the result (the job is terminal
  // in the store), or it gave that attempt up (requeued it, or the job ended another way);
  // never "the same attempt, still active", which a restart would count as lost.
  void check_result_ack(std::size_t node, const protocol::JobFinishedAck& ack) {
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

  void crash_coordinator_now(DurationMs down_ms) {
    if (!coordinator) return;
    coordinator.reset();
    coordinator_tick_at.reset();
    crash_after_actions.reset();
    ++coordinator_incarnation;  // what is in flight to the old process is lost with it
    ++counters.coordinator_crashes;
    log("sim", fmt::format("coordinator crashed; restarts in {} ms", down_ms));
    schedule(down_ms, ev::CoordinatorRestart{});
  }

  void restart_coordinator() {
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

  // ---- agents ----

  void start_agent(std::size_t node) {
    SimAgent& a = agents[node];
    a.core = std::make_unique<agent::AgentCore>(a.identity, options.agent_knobs);
    ++a.incarnation;
    a.core->on_start(wall());
    drain_agent(node);
  }

  void drain_agent(std::size_t node) {
    SimAgent& a = agents[node];
    while (a.core) {
      auto action = a.core->poll_action();
      if (!action) break;
      std::visit(Exhaustive{
                     [&](agent::action::Connect&) { ++a.connection; },
                     [&](agent::action::Send& act) {
                       if (!coordinator) {
                         ++counters.messages_sent;
                         ++counters.messages_dropped;  // nobody listens on the coordinator's port
                         return;
                       }
                       send(Endpoint{Endpoint::Kind::agent, node, a.connection}, coordinator_endpoint(),
                            std::move(act.body), a.next_message_id++, act.corr);
                     },
                     [&](agent::action::StartJob& act) { start_process(node, act.job); },
                     [&](agent::action::CancelJob& act) { cancel_process(node, act.job_id); },
                     [&](agent::action::NotifyPreemption& act) { notify_preemption(node, act.job_id, act.grace_ms); },
                     [&](agent::action::RunProbe&) {
                       schedule(between(process_rng, 200, 3000), ev::ProbeDone{node, a.incarnation, faulty(node), wall()});
                     },
                     [&](agent::action::Log& act) { log(a.identity.node_id, act.text); },
                 },
                 *action);
    }
  }

  void start_process(std::size_t node, const protocol::JobStart& job) {
    SimAgent& a = agents[node];
    for (const auto& [id, p] : a.processes) {
      for (std::uint32_t chip : job.chip_indices) {
        if (std::find(p.chips.begin(), p.chips.end(), chip) != p.chips.end()) {
          ++counters.physical_chip_overlaps;
          if (options.check_physical_chips) {
            fail(fmt::format("node {} started job {} on chip {} while job {} still runs there", a.identity.node_id,
                             job.job_id, chip, id));
          }
        }
      }
    }
    Process p;
    p.process_id = next_process_id++;
    p.job_id = job.job_id;
    p.chips = job.chip_indices;
    p.started_ms = now;
    DurationMs duration = 1000;
    if (auto v = arg_value(job.args, "sim.duration_ms")) duration = std::stoll(*v);
    p.diagnostics = job.workload == protocol::kDiagWorkload;
    if (p.diagnostics) {
      duration = between(process_rng, 2000, 20000);
      auto level = std::find(job.args.begin(), job.args.end(), "--level");
      if (level != job.args.end() && std::next(level) != job.args.end()) {
        const std::string& text = *std::next(level);
        std::from_chars(text.data(), text.data() + text.size(), p.diagnostics_level);
      }
    }
    p.natural_outcome = process_rng.bernoulli(options.workload.job_failure_probability) ? protocol::JobOutcome::failed
                                                                                        : protocol::JobOutcome::succeeded;
    if (auto v = arg_value(job.args, "sim.outcome")) {
      p.natural_outcome = *v == "failed" ? protocol::JobOutcome::failed : protocol::JobOutcome::succeeded;
    }
    if (duration > static_cast<DurationMs>(job.timeout_ms)) {
      duration = job.timeout_ms;
      p.natural_outcome = protocol::JobOutcome::timed_out;
    }
    p.natural_end_ms = now + duration;
    schedule(duration, ev::ProcessEnd{node, p.process_id});
    a.processes[job.job_id] = std::move(p);
  }

  void notify_preemption(std::size_t node, std::uint64_t job_id, std::uint64_t grace_ms) {
    ++counters.preemption_notices;
    auto it = agents[node].processes.find(job_id);
    if (it == agents[node].processes.end() || it->second.checkpointing) return;
    if (!process_rng.bernoulli(options.workload.preempt_checkpoint_probability)) return;  // ignores the notice
    it->second.checkpointing = true;
    const DurationMs limit = std::min<DurationMs>(static_cast<DurationMs>(grace_ms), 30000);
    schedule(between(process_rng, 0, limit), ev::ProcessEnd{node, it->second.process_id});
  }

  void cancel_process(std::size_t node, std::uint64_t job_id) {
    auto it = agents[node].processes.find(job_id);
    if (it == agents[node].processes.end() || it->second.cancelling) return;
    it->second.cancelling = true;
    // The workload gets a signal and takes a moment to stop.
    schedule(between(process_rng, 0, 2000), ev::ProcessEnd{node, it->second.process_id});
  }

  void end_process(std::size_t node, std::uint64_t process_id) {
    SimAgent& a = agents[node];
    auto it = std::find_if(a.processes.begin(), a.processes.end(),
                           [&](const auto& entry) { return entry.second.process_id == process_id; });
    if (it == a.processes.end() || !a.core) return;  // already ended, or died with its agent
    const Process p = it->second;
    a.processes.erase(it);
    agent::JobEnded ended;
    ended.job_id = p.job_id;
    ended.outcome = p.natural_outcome;
    const bool early = now < p.natural_end_ms;
    if (p.cancelling && early) {
      ended.outcome = protocol::JobOutcome::cancelled;
    } else if (p.checkpointing && early) {
      ended.outcome = protocol::JobOutcome::succeeded;
      ended.result = "{\"status\":\"preempted\"}";
    } else if (p.diagnostics) {
      ended.outcome = protocol::JobOutcome::succeeded;
      ended.result = fmt::format("{{\"level\":{},\"verdict\":\"{}\"}}", p.diagnostics_level,
                                 faulty(node) ? "fail" : "pass");
    } else if (faulty(node) && ended.outcome == protocol::JobOutcome::succeeded) {
      ended.outcome = protocol::JobOutcome::failed;
      ended.detail = "device error (simulated node fault)";
    } else if (ended.outcome == protocol::JobOutcome::succeeded) {
      ended.result = fmt::format("{{\"job\":{}}}", p.job_id);
    }
    ended.exit_code = ended.outcome == protocol::JobOutcome::succeeded ? 0
                      : ended.outcome == protocol::JobOutcome::failed ? 1
                                                                      : -15;
    ended.duration_ms = static_cast<std::uint64_t>(now - p.started_ms);
    ended.output_tail = fmt::format("simulated output of job {}", p.job_id);
    a.core->on_job_ended(ended, wall());
    a.core->on_tick(wall());
    drain_agent(node);
  }

  void crash_agent_now(std::size_t node, DurationMs down_ms) {
    SimAgent& a = agents[node];
    if (!a.core) return;
    a.core.reset();
    a.processes.clear();  // its workloads die with it
    a.tick_at.reset();
    ++counters.agent_crashes;
    log("sim", fmt::format("agent {} crashed; restarts in {} ms", a.identity.node_id, down_ms));
    schedule(down_ms, ev::AgentRestart{node});
  }

  // ---- clients and workload ----

  void client_send(std::size_t client, protocol::Body body) {
    if (!coordinator) {
      ++counters.messages_sent;
      ++counters.messages_dropped;
      return;
    }
    send(Endpoint{Endpoint::Kind::client, client, 0}, coordinator_endpoint(), std::move(body),
         clients[client].next_message_id++, 0);
  }

  protocol::SubmitJob draw_job(std::size_t client) {
    const WorkloadOptions& w = options.workload;
    protocol::SubmitJob s;
    static const std::vector<std::string> kWorkloads = {"smoke", "resnet50", "bert-large", "llama-7b", "diag-l1"};
    static const std::vector<std::uint32_t> kChips = {1, 1, 1, 1, 2, 2, 2, 4, 4, 8};
    s.workload = pick(workload_rng, kWorkloads);
    s.chips = pick(workload_rng, kChips);
    if (workload_rng.bernoulli(0.5)) s.hardware_revision = pick(workload_rng, options.shape.revisions);
    switch (clients[client].role) {
      case protocol::Role::developer: s.priority_class = protocol::PriorityClass::experiment; break;
      case protocol::Role::ci:
        s.priority_class = static_cast<protocol::PriorityClass>(workload_rng.below(4));  // release .. nightly
        break;
      default: s.priority_class = static_cast<protocol::PriorityClass>(workload_rng.below(5)); break;
    }
    s.max_attempts = static_cast<std::uint32_t>(1 + workload_rng.below(w.max_attempts_max));
    const DurationMs duration = between(workload_rng, w.job_duration_min_ms, w.job_duration_max_ms);
    DurationMs timeout = std::max<DurationMs>(10000, 2 * duration);
    if (workload_rng.bernoulli(w.job_overrun_probability)) timeout = std::max<DurationMs>(1000, duration / 2);
    s.timeout_ms = static_cast<std::uint32_t>(timeout);
    s.args = {fmt::format("sim.duration_ms={}", duration)};
    s.seed = workload_rng.next_u64() >> 1;
    return s;
  }

  void deliver_to_client(std::size_t client, const protocol::Envelope& m) {
    if (const auto* acc = std::get_if<protocol::JobAccepted>(&m.body)) {
      if (!quiet && client != lab_client && workload_rng.bernoulli(options.workload.cancel_probability)) {
        schedule(between(workload_rng, 0, 60000), ev::ClientCancel{client, acc->job_id});
      }
    } else if (const auto* granted = std::get_if<protocol::LeaseGranted>(&m.body)) {
      lease_reply(client, granted->lease);
    } else if (const auto* pending = std::get_if<protocol::LeasePending>(&m.body)) {
      lease_reply(client, pending->lease);
    }
  }

  // A developer with a lease runs a job in it now and then, and releases it early or lets
  // it expire.
  void lease_reply(std::size_t client, const protocol::LeaseSummary& lease) {
    if (quiet || options.workload.lease_requests_per_minute <= 0) return;  // scenarios script their own
    if (lease.state == protocol::LeaseState::granted && workload_rng.bernoulli(0.5)) {
      schedule(between(workload_rng, 100, 5000), ev::ClientSubmitInLease{client, lease.lease_id, lease.chips});
    }
    if (workload_rng.bernoulli(0.5)) {
      schedule(between(workload_rng, 5000, static_cast<DurationMs>(lease.duration_ms)),
               ev::ClientReleaseLease{client, lease.lease_id});
    }
  }

  // ---- faults ----

  void schedule_next_fault() {
    const FaultOptions& f = options.faults;
    const double total = f.agent_crashes_per_minute + f.coordinator_crashes_per_minute + f.partitions_per_minute +
                         f.node_faults_per_minute;
    if (total <= 0 || quiet) return;
    schedule(exponential_ms(fault_rng, total), ev::NextFault{});
  }

  void inject_fault() {
    const FaultOptions& f = options.faults;
    const double total = f.agent_crashes_per_minute + f.coordinator_crashes_per_minute + f.partitions_per_minute +
                         f.node_faults_per_minute;
    const double x = fault_rng.uniform(0, total);
    if (x < f.agent_crashes_per_minute) {
      const std::size_t node = fault_rng.below(agents.size());
      crash_agent_now(node, between(fault_rng, f.agent_down_min_ms, f.agent_down_max_ms));
    } else if (x < f.agent_crashes_per_minute + f.coordinator_crashes_per_minute) {
      const DurationMs down = between(fault_rng, f.coordinator_down_min_ms, f.coordinator_down_max_ms);
      if (fault_rng.bernoulli(f.coordinator_crash_mid_step_probability)) {
        crash_after_actions = 1 + fault_rng.below(6);
        pending_crash_down_ms = down;
      } else {
        crash_coordinator_now(down);
      }
    } else if (x < f.agent_crashes_per_minute + f.coordinator_crashes_per_minute + f.partitions_per_minute) {
      const std::size_t node = fault_rng.below(agents.size());
      start_partition(node, between(fault_rng, f.partition_min_ms, f.partition_max_ms));
    } else {
      const std::size_t node = fault_rng.below(agents.size());
      start_node_fault(node, between(fault_rng, f.node_fault_min_ms, f.node_fault_max_ms));
    }
  }

  void start_node_fault(std::size_t node, DurationMs duration_ms) {
    SimAgent& a = agents[node];
    a.faulty_until = std::max(a.faulty_until, now + duration_ms);
    ++counters.node_faults;
    log("sim", fmt::format("node {} develops a chip fault for {} ms", a.identity.node_id, duration_ms));
  }

  void start_partition(std::size_t node, DurationMs duration_ms) {
    SimAgent& a = agents[node];
    a.partitioned_until = std::max(a.partitioned_until, now + duration_ms);
    ++counters.partitions;
    log("sim", fmt::format("node {} cut off from the coordinator for {} ms", a.identity.node_id, duration_ms));
  }

  // ---- events ----

  // The routing id the coordinator knows a sender by, and the sender's key name.
  std::pair<std::string, std::string> coordinator_peer(const Endpoint& from) const {
    if (from.kind == Endpoint::Kind::agent) {
      const SimAgent& a = agents[from.index];
      return {fmt::format("{}/{}", a.identity.node_id, from.connection), a.identity.node_id};
    }
    return {clients[from.index].key_name, clients[from.index].key_name};
  }

  // The envelope a delivered packet carries. The coordinator takes it through the real shell's
  // admission (decode, or refuse with an error reply to the sender). A message that does not
  // decode is a violation wherever it goes: everything the cores say must.
  std::optional<protocol::Envelope> open(Packet& p) {
    if (!options.faults.network.round_trip_codec) return std::move(p.envelope);
    Result<protocol::Envelope> decoded;
    if (p.to.kind == Endpoint::Kind::coordinator) {
      const auto [peer, sender] = coordinator_peer(p.from);
      decoded = coordinator::admit_message(
          coordinator::ReceivedFrames{peer, p.from.kind == Endpoint::Kind::agent, sender, p.frames.header,
                                      p.frames.body},
          coordinator_limits, coordinator_io);
    } else {
      decoded = protocol::decode(p.frames.header, p.frames.body);
    }
    if (!decoded) {
      fail(fmt::format("the codec refused to decode a {} from {}: {}", p.type, endpoint_name(p.from),
                       decoded.error().describe()));
      return std::nullopt;
    }
    return std::move(*decoded);
  }

  void handle(ev::Deliver& e) {
    Packet& p = e.packet;
    if (partitioned(p.from, p.to)) {
      ++counters.messages_dropped;
      return;
    }
    if (p.to.kind == Endpoint::Kind::coordinator && (!coordinator || p.to.connection != coordinator_incarnation)) {
      ++counters.messages_dropped;
      return;
    }
    auto envelope = open(p);
    if (!envelope) return;
    if (options.log_messages) {
      log("net", fmt::format("{} -> {}: {} id {} corr {}", endpoint_name(p.from), endpoint_name(p.to), p.type,
                             envelope->header.id, envelope->header.corr));
    }
    switch (p.to.kind) {
      case Endpoint::Kind::coordinator: {
        const auto [peer, sender] = coordinator_peer(p.from);
        if (p.from.kind == Endpoint::Kind::agent) {
          agents[p.from.index].last_heard_by_coordinator = now;
          coordinator->on_agent_message(peer, coordinator::Caller{sender, protocol::Role::agent}, *envelope, wall());
        } else {
          coordinator->on_client_message(peer, coordinator::Caller{sender, clients[p.from.index].role}, *envelope,
                                         wall());
        }
        drain_coordinator();
        if (coordinator) coordinator->on_tick(wall());  // the real shell ticks after every message
        drain_coordinator();
        return;
      }
      case Endpoint::Kind::agent: {
        SimAgent& a = agents[p.to.index];
        if (!a.core || p.to.connection != a.connection) {
          ++counters.messages_dropped;  // the agent died, or that connection was closed
          return;
        }
        a.core->on_message(*envelope, wall());
        a.core->on_tick(wall());
        drain_agent(p.to.index);
        return;
      }
      case Endpoint::Kind::client: deliver_to_client(p.to.index, *envelope); return;
    }
  }

  void handle(ev::CoordinatorTick&) {
    if (!coordinator || coordinator_tick_at != now) return;  // superseded, or its coordinator died
    coordinator_tick_at.reset();
    coordinator->on_tick(wall());
    drain_coordinator();
  }

  void handle(ev::AgentTick& e) {
    SimAgent& a = agents[e.node];
    if (!a.core || a.tick_at != now) return;
    a.tick_at.reset();
    a.core->on_tick(wall());
    drain_agent(e.node);
  }

  void handle(ev::ProcessEnd& e) { end_process(e.node, e.process_id); }

  void handle(ev::CoordinatorCrash& e) {
    if (!coordinator) return;
    if (e.mid_step) {
      crash_after_actions = 1;
      pending_crash_down_ms = e.down_ms;
    } else {
      crash_coordinator_now(e.down_ms);
    }
  }

  void handle(ev::CoordinatorRestart&) { restart_coordinator(); }
  void handle(ev::AgentCrash& e) { crash_agent_now(e.node, e.down_ms); }

  void handle(ev::AgentRestart& e) {
    if (agents[e.node].core) return;
    log("sim", fmt::format("agent {} restarts", agents[e.node].identity.node_id));
    start_agent(e.node);
  }

  void handle(ev::PartitionStart& e) { start_partition(e.node, e.duration_ms); }

  void handle(ev::ClientSubmit& e) {
    log(clients[e.client].key_name, fmt::format("submits {} on {} chips (rev '{}', {} attempts)", e.job.workload,
                                                e.job.chips, e.job.hardware_revision, e.job.max_attempts));
    client_send(e.client, e.job);
  }

  void handle(ev::ClientCancel& e) {
    log(clients[e.client].key_name, fmt::format("cancels job {}", e.job_id));
    client_send(e.client, protocol::CancelJob{e.job_id});
  }

  void handle(ev::NodeFault& e) { start_node_fault(e.node, e.duration_ms); }

  void handle(ev::ProbeDone& e) {
    SimAgent& a = agents[e.node];
    if (!a.core || a.incarnation != e.incarnation) return;  // the probe died with its agent
    protocol::HealthReport report;
    protocol::HealthCheck check;
    check.check = "chip_health";
    check.chip = 0;
    check.status = e.faulty ? protocol::HealthStatus::fail : protocol::HealthStatus::pass;
    check.reason_code = e.faulty ? "sim.chip_fault" : "";
    check.category = "hardware";
    report.checks.push_back(check);
    report.verdict = check.status;
    a.core->on_probe_result(report, e.measured_at_wall_ms, wall());
    drain_agent(e.node);
  }

  void handle(ev::ClientRequestLease& e) {
    protocol::RequestLease r;
    static const std::vector<std::uint32_t> kChips = {1, 2, 4, 8};
    r.chips = pick(workload_rng, kChips);
    if (workload_rng.bernoulli(0.3)) r.hardware_revision = pick(workload_rng, options.shape.revisions);
    r.duration_ms = static_cast<std::uint64_t>(between(workload_rng, 60000, 180000));
    r.priority_class = protocol::PriorityClass::experiment;
    ++counters.leases_requested;
    log(clients[e.client].key_name, fmt::format("requests a lease of {} chips for {} ms", r.chips, r.duration_ms));
    client_send(e.client, r);
  }

  void handle(ev::ClientReleaseLease& e) {
    log(clients[e.client].key_name, fmt::format("releases lease L{}", e.lease_id));
    client_send(e.client, protocol::ReleaseLease{e.lease_id});
  }

  void handle(ev::ClientSubmitInLease& e) {
    protocol::SubmitInLease s;
    s.lease_id = e.lease_id;
    s.job = draw_job(e.client);
    s.job.chips = std::min(s.job.chips, e.chips);
    s.job.hardware_revision.clear();
    log(clients[e.client].key_name, fmt::format("submits {} on {} chips in lease L{}", s.job.workload, s.job.chips,
                                                e.lease_id));
    client_send(e.client, s);
  }

  void handle(ev::ClientSend& e) {
    log(clients[e.client].key_name, fmt::format("sends {}", protocol::type_name(e.body)));
    client_send(e.client, std::move(e.body));
  }

  void handle(ev::NextLeaseRequest&) {
    if (quiet) return;
    ev::ClientRequestLease request{*developer_client()};
    handle(request);
    schedule(exponential_ms(workload_rng, options.workload.lease_requests_per_minute), ev::NextLeaseRequest{});
  }

  // The lab engineer looks at `kiln nodes`: a quarantined node whose fault is repaired gets
  // the diagnostics that return it (again, if a previous run got lost).
  void handle(ev::LabRound&) {
    schedule(options.workload.lab_round_ms, ev::LabRound{});
    if (!coordinator) return;
    for (std::size_t i = 0; i < agents.size(); ++i) {
      SimAgent& a = agents[i];
      auto node = coordinator->nodes().find(a.identity.node_id);
      if (node == coordinator->nodes().end() || node->second.summary.state != protocol::NodeState::quarantined ||
          faulty(i)) {
        continue;
      }
      if (a.diagnostics_submitted_at >= 0 && now - a.diagnostics_submitted_at < 5 * kMinuteMs) continue;
      a.diagnostics_submitted_at = now;
      // The level that brings it back: 3 for a flapping node (its quarantine reason says so),
      // otherwise the coordinator's configured minimum.
      const std::uint32_t level = node->second.recent_quarantines >= 2
                                      ? 3u
                                      : std::max(2u, options.coordinator_knobs.quarantine_release_min_diag_level);
      protocol::SubmitJob diag;
      diag.workload = std::string(protocol::kDiagWorkload);
      diag.args = {"--level", std::to_string(level)};
      diag.node_id = a.identity.node_id;
      diag.chips = options.shape.chips_per_node;
      diag.priority_class = protocol::PriorityClass::experiment;
      diag.max_attempts = 1;
      diag.timeout_ms = 600000;
      log("lab", fmt::format("runs level {} diagnostics on repaired node {}", level, a.identity.node_id));
      client_send(lab_client, diag);
    }
  }

  void handle(ev::NextSubmission&) {
    if (quiet) return;
    const std::size_t client = workload_rng.below(lab_client);  // the lab only runs diagnostics
    ev::ClientSubmit submit{client, draw_job(client)};
    handle(submit);
    schedule(exponential_ms(workload_rng, options.workload.submits_per_minute), ev::NextSubmission{});
  }

  void handle(ev::NextFault&) {
    if (quiet) return;
    inject_fault();
    schedule_next_fault();
  }

  // ---- ticks ----

  void refresh_ticks() {
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

  // ---- invariants ----

  void check_invariants() {
    if (violation) return;
    for (const auto& [node, ack] : acks_this_step) check_result_ack(node, ack);
    acks_this_step.clear();
    if (violation) return;
    if (coordinator) check_coordinator();
    if (violation) return;
    for (std::uint64_t id : accepted) {
      if (stored_jobs.count(id) == 0) {
        return fail(fmt::format("job {} was acknowledged to its client (job_accepted) but is not in the store", id));
      }
    }
    for (const auto& [id, job] : stored_jobs) {
      if (counted_attempts(job) > job.summary.max_attempts) {
        return fail(fmt::format("the store holds job {} on attempt {} ({} preempted) of at most {}", id,
                                job.summary.attempt, job.preemptions, job.summary.max_attempts));
      }
    }
    for (const auto& [id, attempt] : acked_results) {
      const auto& s = stored_jobs.at(id).summary;
      if (!protocol::is_terminal(s.state)) {
        return fail(fmt::format("job {} attempt {}: its result was acknowledged to the agent, but the store now "
                                "holds the job as {}",
                                id, attempt, protocol::enum_name(s.state)));
      }
    }
  }

  // Preempted attempts do not count against max_attempts.
  static std::uint32_t counted_attempts(const JobRecord& job) {
    return job.summary.attempt - std::min(job.summary.attempt, job.preemptions);
  }

  void check_coordinator() {
    const auto& knobs = options.coordinator_knobs;
    const DurationMs liveness_ms = knobs.liveness_timeout_ms();
    const DurationMs allowance_ms = options.tick_allowance_ms;
    if (auto s = coordinator->scheduler().check_invariants(); !s) {
      return fail("the scheduler's own invariants: " + s.error().message);
    }
    // Developer leases: chips held, and no lease living past its expiry.
    std::map<std::uint64_t, std::map<std::string, std::set<std::uint32_t>>> lease_chips;
    std::map<std::string, std::map<std::uint32_t, std::string>> chip_owner;  // node -> chip -> holder
    auto hold = [&](const std::string& node, std::uint32_t chip, const std::string& holder) {
      auto [owner, inserted] = chip_owner[node].emplace(chip, holder);
      if (!inserted) {
        fail(fmt::format("chip {} of node {} is held by {} and by {} at once", chip, node, owner->second, holder));
      }
      return inserted;
    };
    for (const auto& lease : coordinator->leases()) {
      if (lease.state != protocol::LeaseState::granted && lease.state != protocol::LeaseState::preempting) continue;
      if (lease.expires_at_ms > 0 &&
          wall() > static_cast<TimeMs>(lease.expires_at_ms) + liveness_ms + allowance_ms) {
        auto at = [&](std::uint64_t wall_ms) {
          return wall_ms == 0 ? std::string("-") : fmt::format("t={}", static_cast<TimeMs>(wall_ms) - options.start_wall_ms);
        };
        return fail(fmt::format("lease L{} is still {} {} ms after it expired (granted {}, expired {}, grace deadline "
                                "{}; liveness timeout {} ms)",
                                lease.lease_id, protocol::enum_name(lease.state),
                                wall() - static_cast<TimeMs>(lease.expires_at_ms), at(lease.granted_at_ms),
                                at(lease.expires_at_ms), at(lease.grace_deadline_ms), liveness_ms));
      }
      for (const auto& p : lease.placement) {
        for (std::uint32_t chip : p.chip_indices) {
          lease_chips[lease.lease_id][p.node_id].insert(chip);
          if (!hold(p.node_id, chip, fmt::format("lease L{}", lease.lease_id))) return;
        }
      }
    }
    // The scheduler's leases (jobs' and developers') past their expiry. Its clock starts at
    // midnight of the day the core started (coordinator_core.h).
    const TimeMs started_wall = options.start_wall_ms + coordinator_started_at;
    constexpr TimeMs kDayMs = 24 * kHourMs;
    const TimeMs scheduler_now = wall() - started_wall / kDayMs * kDayMs;
    for (const auto& lease : coordinator->scheduler().leases()) {
      if (lease.expires_at_ms > 0 && scheduler_now > lease.expires_at_ms + liveness_ms + allowance_ms) {
        return fail(fmt::format("scheduler lease {} (request {}) is still held {} ms after it expired", lease.lease,
                                lease.request, scheduler_now - lease.expires_at_ms));
      }
    }
    for (const auto& [id, job] : coordinator->jobs()) {
      const auto& s = job.summary;
      if (counted_attempts(job) > s.max_attempts) {
        return fail(fmt::format("job {} is on attempt {} ({} preempted) but allows at most {}", id, s.attempt,
                                job.preemptions, s.max_attempts));
      }
      if (s.state != JobState::assigned && s.state != JobState::running) continue;
      auto node = coordinator->nodes().find(s.node_id);
      if (node == coordinator->nodes().end()) {
        return fail(fmt::format("job {} is {} on node '{}', which the coordinator does not know", id,
                                protocol::enum_name(s.state), s.node_id));
      }
      if (node->second.summary.state == protocol::NodeState::lost) {
        return fail(fmt::format("job {} is still {} on node {}, which the coordinator marked lost", id,
                                protocol::enum_name(s.state), s.node_id));
      }
      for (std::uint32_t chip : s.chip_indices) {
        // A job on a chip its developer lease holds is covered by the lease. Any other active
        // job holds its chips itself: also one whose lease ended, or was revoked and granted
        // elsewhere, while the job is still being stopped.
        if (job.lease_id != 0) {
          auto lease = lease_chips.find(job.lease_id);
          if (lease != lease_chips.end() && lease->second[s.node_id].count(chip) != 0) continue;
        }
        if (!hold(s.node_id, chip, fmt::format("job {}", id))) return;
      }
      const TimeMs started = job.started_at_ms - options.start_wall_ms;
      if (now > started + job.timeout_ms + knobs.job_timeout_slack_ms + allowance_ms) {
        return fail(fmt::format("job {} is still {} on node {} {} ms after its dispatch; its timeout is {} ms plus "
                                "{} ms of slack",
                                id, protocol::enum_name(s.state), s.node_id, now - started, job.timeout_ms,
                                knobs.job_timeout_slack_ms));
      }
      auto agent = agent_by_node_id.find(s.node_id);
      if (agent != agent_by_node_id.end()) {
        // After a start the recovered nodes have the restart grace to register.
        const TimeMs heard = std::max(agents[agent->second].last_heard_by_coordinator, coordinator_started_at);
        const TimeMs registered_by = coordinator_started_at + std::max<TimeMs>(knobs.restart_grace_ms, liveness_ms);
        if (now > std::max(heard + liveness_ms, registered_by) + allowance_ms) {
          return fail(fmt::format("job {} is still {} on node {}, which the coordinator has not heard from for "
                                  "{} ms (liveness timeout {} ms)",
                                  id, protocol::enum_name(s.state), s.node_id, now - heard, liveness_ms));
        }
      }
    }
    // A quarantined node returns only after passing diagnostics (being lost in between does
    // not count).
    for (const auto& [node_id, node] : coordinator->nodes()) {
      const auto state = node.summary.state;
      if (state == protocol::NodeState::quarantined) {
        if (in_quarantine.insert(node_id).second) diagnostics_passed.erase(node_id);
      } else if (state != protocol::NodeState::lost && in_quarantine.count(node_id)) {
        if (!diagnostics_passed.count(node_id)) {
          return fail(fmt::format("node {} left quarantine ({}) without passing diagnostics", node_id,
                                  protocol::enum_name(state)));
        }
        in_quarantine.erase(node_id);
      }
    }
    for (const auto& [node_id, node] : coordinator->nodes()) {
      auto held = chip_owner.find(node_id);
      const std::size_t expected = held == chip_owner.end() ? 0 : held->second.size();
      if (node.summary.chips_used != expected) {
        return fail(fmt::format("node {} reports {} chips used but its active jobs and leases hold {}", node_id,
                                node.summary.chips_used, expected));
      }
    }
  }

  bool all_jobs_terminal() const {
    if (!coordinator) return false;
    for (const auto& lease : coordinator->leases()) {
      if (lease.state != protocol::LeaseState::ended) return false;
    }
    for (const auto& [id, job] : stored_jobs) {
      if (!protocol::is_terminal(job.summary.state)) return false;
    }
    for (const auto& [id, job] : coordinator->jobs()) {
      if (!protocol::is_terminal(job.summary.state)) return false;
    }
    return true;
  }

  // ---- driving ----

  void step() {
    auto it = queue.begin();
    now = it->first.first;
    Event event = std::move(it->second);
    queue.erase(it);
    ++steps;
    std::visit([&](auto& e) { handle(e); }, event);
    refresh_ticks();
    check_invariants();
  }

  void run_until(TimeMs until) {
    while (!violation && !queue.empty() && queue.begin()->first.first <= until) step();
    if (!violation) now = std::max(now, until);
  }

  // How long the quiet tail may take: quiet_tail_max_ms, plus twice the time the whole cluster
  // needs to run the work still outstanding (each unfinished job's run time on its chips, each
  // live lease's duration on its chips). A backlog cannot drain faster than that, whatever the
  // cores do; the factor two covers chips left idle by placement and work lost to preemption.
  DurationMs quiet_tail_allowance_ms() const {
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

  void run_quiet_tail() {
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

  RunSummary summary() const {
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
};

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
