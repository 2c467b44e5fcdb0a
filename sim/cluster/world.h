// The simulated world of one run: the coordinator and agent cores, their simulated network,
// processes, store and clients, and the invariants checked after every step. Shared by the files
// of the simulation: cluster_sim.cpp (the world and its driving), cluster_network.cpp (messages,
// loss, partitions), cluster_coordinator.cpp (the coordinator, its shell and store),
// cluster_processes.cpp (agents and the processes of their jobs), cluster_workload.cpp (clients,
// faults and the events that drive them), cluster_invariants.cpp. Internal: only they include it.
#pragma once

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
#include "coordinator/server/action_interpreter.h"

namespace kiln::sim::cluster {

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
  kReportStream = 5,
  kShapeOptionsStream = 11,
  kFaultOptionsStream = 12,
  kWorkloadOptionsStream = 13,
};

// What every simulated agent runs besides the built-ins (its hello's workloads), and what the
// clients submit.
inline const std::vector<std::string>& cluster_workloads() {
  static const std::vector<std::string> workloads = {"smoke", "resnet50", "bert-large", "llama-7b", "diag-l1"};
  return workloads;
}

inline DurationMs between(Rng& rng, DurationMs low, DurationMs high) {
  if (high <= low) return low;
  return low + static_cast<DurationMs>(rng.below(static_cast<std::uint64_t>(high - low + 1)));
}

// Exponential inter-arrival time for a rate per minute, at least 1 ms.
inline DurationMs exponential_ms(Rng& rng, double per_minute) {
  const double mean_ms = static_cast<double>(kMinuteMs) / per_minute;
  return std::max<DurationMs>(1, static_cast<DurationMs>(-std::log(1.0 - rng.uniform01()) * mean_ms));
}

template <class T>
inline const T& pick(Rng& rng, const std::vector<T>& values) {
  return values[rng.below(values.size())];
}

inline constexpr std::uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr std::uint64_t kFnvPrime = 1099511628211ull;

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
// `kiln result` of a job accepted earlier, often one the coordinator has let go of by then.
struct ClientGetJob {
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
// The ci client records a run report (a qualification_run record), or its next version as the
// run goes; and reads reports back by key or as a list.
struct ClientPutReport {
  std::uint64_t run = 0;
  std::uint32_t version = 1;
};
struct ClientReadReports {
  std::uint64_t run = 0;
  bool list = false;
  bool newest_first = false;  // a list read as a reader of the latest runs reads it
};
// One of two qualifiers claims a requested run, or renews its claim.
struct ClientClaim {
  std::uint64_t run = 0;
  std::string owner;
  std::uint32_t attempt = 1;
};
struct NextRunReport {};
struct NextSubmission {};
struct NextLeaseRequest {};
struct NextFault {};
struct LabRound {};
}  // namespace ev

using Event = std::variant<ev::Deliver, ev::CoordinatorTick, ev::AgentTick, ev::ProcessEnd, ev::CoordinatorCrash,
                           ev::CoordinatorRestart, ev::AgentCrash, ev::AgentRestart, ev::PartitionStart,
                           ev::ClientSubmit, ev::ClientCancel, ev::ClientGetJob, ev::NodeFault, ev::ProbeDone, ev::ClientRequestLease,
                           ev::ClientReleaseLease, ev::ClientSubmitInLease, ev::ClientSend, ev::NextSubmission,
                           ev::NextLeaseRequest, ev::ClientPutReport, ev::ClientReadReports, ev::ClientClaim,
                           ev::NextRunReport,
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

inline std::optional<std::string> arg_value(const std::vector<std::string>& args, std::string_view key) {
  for (const auto& arg : args) {
    if (arg.size() > key.size() && arg.compare(0, key.size(), key) == 0 && arg[key.size()] == '=') {
      return arg.substr(key.size() + 1);
    }
  }
  return std::nullopt;
}


struct Simulation::World {
  SimOptions options;
  Rng network_rng;
  Rng fault_rng;
  Rng workload_rng;
  Rng process_rng;
  Rng report_rng;

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
  std::uint64_t audit_lines = 0;  // appended to the coordinator's audit log
  std::map<std::uint64_t, coordinator::LeaseRecord> stored_leases;
  std::set<std::uint64_t> accepted;                                // job_accepted sent
  // The get_job requests awaiting their answer: (client, message id) -> job id.
  std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t> gets_awaited;
  // Run reports: the newest version of each run the coordinator acknowledged, the puts awaiting
  // their answer (message id -> run, version), and the reads awaiting theirs with what had been
  // acknowledged when they were sent (a read must show that version or a later one).
  std::map<std::uint64_t, std::uint32_t> reports_acknowledged;
  std::uint64_t next_report_run = 1;
  // Each run is requested on one bundle (its change and the bundle recorded first), then two
  // qualifiers claim it: no two owners' claims may hold at once, across restarts too.
  bool report_bundle_acknowledged = false;
  // Every claim sent, per run: acknowledged (taken), refused, or neither (lost, or not answered yet).
  struct ClaimSent {
    std::string owner;
    TimeMs sent_wall_ms = 0;
    DurationMs lease_ms = 0;
    TimeMs acknowledged_wall_ms = 0;
    bool refused = false;
  };
  std::map<std::uint64_t, std::vector<ClaimSent>> claims_sent;
  struct RecordPut {
    protocol::RecordKind kind = protocol::RecordKind::qualification_run;
    std::uint64_t run = 0;
    std::uint32_t version = 0;  // a report's
    std::size_t claim = 0;      // a claim's index in claims_sent
    std::uint32_t attempt = 0;  // a claim's
  };
  std::map<std::uint64_t, RecordPut> report_puts_awaited;
  struct ReportRead {
    std::uint64_t run = 0;
    bool list = false;
    bool newest_first = false;
    std::map<std::uint64_t, std::uint32_t> acknowledged;
  };
  std::map<std::uint64_t, ReportRead> report_reads_awaited;
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
    Status append_audit(const protocol::AuditEntry&) override {
      return world.coordinator_save(StoredKind::audit, [&] { ++world.audit_lines; });
    }
    Result<std::optional<JobRecord>> recall_job(std::uint64_t job_id) override {
      if (world.coordinator_halted) return kiln::fail(Errc::unavailable, "the coordinator process has died");
      auto it = world.stored_jobs.find(job_id);
      if (it == world.stored_jobs.end()) return std::optional<JobRecord>();
      return std::optional<JobRecord>(it->second);
    }
    Result<std::vector<protocol::RecordEntry>> read_records(
        const std::variant<protocol::GetRecord, protocol::ListRecords>& query) override {
      if (world.coordinator_halted) return kiln::fail(Errc::unavailable, "the coordinator process has died");
      return coordinator::read_from(world.stored_records, query);
    }
    void log(coordinator::action::Severity, const std::string& text) override { world.coordinator_log(text); }
  };
  SimCoordinatorIo coordinator_io{*this};
  protocol::CodecLimits coordinator_limits;

  explicit World(SimOptions o);

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

  void log(const std::string& source, const std::string& text);

  void fail(std::string invariant);

  std::string endpoint_name(const Endpoint& e) const;

  std::string link_key(const Endpoint& from, const Endpoint& to) const {
    return fmt::format("{}/{}>{}/{}", endpoint_name(from), from.connection, endpoint_name(to), to.connection);
  }

  bool partitioned(const Endpoint& a, const Endpoint& b) const;

  void send(Endpoint from, Endpoint to, protocol::Body body, std::uint64_t id, std::uint64_t corr);

  Endpoint coordinator_endpoint() const {
    return Endpoint{Endpoint::Kind::coordinator, 0, coordinator_incarnation};
  }

  // ---- coordinator ----

  // The coordinator's actions are carried out by the real shell's interpreter over the
  // simulated network and store (SimCoordinatorIo). A crash in the middle of a step halts
  // the process after the chosen number of actions: it carries out nothing more. A failed save
  // stops the coordinator as it stops the real one; its supervisor restarts it.
  void drain_coordinator();

  // One action carried out: a mid-step crash may strike now.
  void coordinator_action_done();

  Status coordinator_save(StoredKind kind, const std::function<void()>& store);

  void coordinator_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr);

  void coordinator_to_client(const std::string& client_key, protocol::Body body, std::uint64_t corr);

  void note_saved_job(const JobRecord& job);

  void coordinator_log(const std::string& text);

  // What the store holds: what a restarted coordinator recovers.
  coordinator::Snapshot stored() const;

  // A job_finished_ack tells the agent it may forget the result. By the end of the step (or
  // the crash that cut it short) either the coordinator stored the result (the job is terminal
  // in the store), or it gave that attempt up (requeued it, or the job ended another way);
  // never "the same attempt, still active", which a restart would count as lost.
  void check_result_ack(std::size_t node, const protocol::JobFinishedAck& ack);

  void crash_coordinator_now(DurationMs down_ms);

  void restart_coordinator();

  // ---- agents ----

  void start_agent(std::size_t node);

  void drain_agent(std::size_t node);

  void start_process(std::size_t node, const protocol::JobStart& job);

  void notify_preemption(std::size_t node, std::uint64_t job_id, std::uint64_t grace_ms);

  void cancel_process(std::size_t node, std::uint64_t job_id);

  void end_process(std::size_t node, std::uint64_t process_id);

  void crash_agent_now(std::size_t node, DurationMs down_ms);

  // ---- clients and workload ----

  void client_send(std::size_t client, protocol::Body body);

  protocol::SubmitJob draw_job(std::size_t client);

  void deliver_to_client(std::size_t client, const protocol::Envelope& m);

  // A developer with a lease runs a job in it now and then, and releases it early or lets
  // it expire.
  void lease_reply(std::size_t client, const protocol::LeaseSummary& lease);

  // ---- faults ----

  void schedule_next_fault();

  void inject_fault();

  void start_node_fault(std::size_t node, DurationMs duration_ms);

  void start_partition(std::size_t node, DurationMs duration_ms);

  // ---- events ----

  // The routing id the coordinator knows a sender by, and the sender's key name.
  std::pair<std::string, std::string> coordinator_peer(const Endpoint& from) const;

  // The envelope a delivered packet carries. The coordinator takes it through the real shell's
  // admission (decode, or refuse with an error reply to the sender). A message that does not
  // decode is a violation wherever it goes: everything the cores say must.
  std::optional<protocol::Envelope> open(Packet& p);

  void handle(ev::Deliver& e);

  void handle(ev::CoordinatorTick&);

  void handle(ev::AgentTick& e);

  void handle(ev::ProcessEnd& e) { end_process(e.node, e.process_id); }

  void handle(ev::CoordinatorCrash& e);

  void handle(ev::CoordinatorRestart&) { restart_coordinator(); }
  void handle(ev::AgentCrash& e) { crash_agent_now(e.node, e.down_ms); }

  void handle(ev::AgentRestart& e);

  void handle(ev::PartitionStart& e) { start_partition(e.node, e.duration_ms); }

  void handle(ev::ClientSubmit& e);

  void handle(ev::ClientCancel& e);
  void handle(ev::ClientGetJob& e);
  void check_job_read_back(std::uint64_t job_id, const protocol::Body& answer);
  void handle(ev::ClientPutReport& e);
  void handle(ev::ClientReadReports& e);
  void handle(ev::NextRunReport&);
  void handle(ev::ClientClaim& e);
  void put_record_awaited(const protocol::PutRecord& put, RecordPut awaited);
  void claim_answered(const RecordPut& put, const protocol::ErrorReply* error);
  // The answer to a report put or read of the ci client; false when `corr` is not one.
  bool report_answered(std::uint64_t corr, const protocol::Body& answer);

  void handle(ev::NodeFault& e) { start_node_fault(e.node, e.duration_ms); }

  void handle(ev::ProbeDone& e);

  void handle(ev::ClientRequestLease& e);

  void handle(ev::ClientReleaseLease& e);

  void handle(ev::ClientSubmitInLease& e);

  void handle(ev::ClientSend& e);

  void handle(ev::NextLeaseRequest&);

  // The lab engineer looks at `kiln nodes`: a quarantined node whose fault is repaired gets
  // the diagnostics that return it (again, if a previous run got lost).
  void handle(ev::LabRound&);

  void handle(ev::NextSubmission&);

  void handle(ev::NextFault&);

  // ---- ticks ----

  void refresh_ticks();

  // ---- invariants ----

  void check_invariants();

  // Preempted attempts do not count against max_attempts.
  static std::uint32_t counted_attempts(const JobRecord& job);

  void check_coordinator();

  bool all_jobs_terminal() const;

  // ---- driving ----

  void step();

  void run_until(TimeMs until);

  // How long the quiet tail may take: quiet_tail_max_ms, plus twice the time the whole cluster
  // needs to run the work still outstanding (each unfinished job's run time on its chips, each
  // live lease's duration on its chips). A backlog cannot drain faster than that, whatever the
  // cores do; the factor two covers chips left idle by placement and work lost to preemption.
  DurationMs quiet_tail_allowance_ms() const;

  void run_quiet_tail();

  RunSummary summary() const;
};

}  // namespace kiln::sim::cluster
