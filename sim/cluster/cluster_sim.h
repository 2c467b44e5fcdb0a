// Deterministic simulation of a kiln cluster: the real CoordinatorCore and AgentCores, unchanged,
// driven by a simulated clock, network, process layer and store, all under one seed. Faults
// (message delay, loss, duplication, partitions, agent and coordinator crashes) come from a
// seeded schedule; invariants are checked after every event. One seed reproduces a run exactly,
// including its log. (TigerBeetle's VOPR, FoundationDB's simulation.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/core/agent_core.h"
#include "common/protocol/messages.h"
#include "common/time.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/knobs.h"
#include "coordinator/core/records.h"

namespace kiln::sim::cluster {

// What the simulated network does to each message between the coordinator and an agent or a
// client. Delay applies always; loss and duplication only during the fault period.
struct NetworkFaults {
  DurationMs delay_min_ms = 1;
  DurationMs delay_max_ms = 20;
  double loss_probability = 0.0;
  double duplicate_probability = 0.0;
  // Messages of these types (protocol type names, e.g. "job_finished") are always sent twice,
  // also in the quiet tail: focused scenarios use this to replay one kind of message.
  std::vector<std::string> always_duplicate_types;
  // One TCP connection keeps order; false lets per-message delays reorder a link.
  bool preserve_order = true;
  // Encode every message with protocol::encode and decode it on delivery, so the codec's
  // bounds are exercised by everything the cores say.
  bool round_trip_codec = true;
};

// Rates of the seeded fault schedule during the fault period (0 switches a kind off).
struct FaultOptions {
  NetworkFaults network;
  double agent_crashes_per_minute = 0.0;  // across the cluster
  DurationMs agent_down_min_ms = 1000;
  DurationMs agent_down_max_ms = 20000;
  double coordinator_crashes_per_minute = 0.0;
  DurationMs coordinator_down_min_ms = 500;
  DurationMs coordinator_down_max_ms = 15000;
  // Share of coordinator crashes that strike in the middle of carrying out one step's actions
  // (after some saves or sends, before the rest), not between steps.
  double coordinator_crash_mid_step_probability = 0.5;
  double partitions_per_minute = 0.0;  // one node cut off from the coordinator, both ways
  DurationMs partition_min_ms = 1000;
  DurationMs partition_max_ms = 30000;
  // A node fault: while it lasts the node's health probes and diagnostics fail and its jobs
  // fail. The coordinator should quarantine the node; the lab client brings it back with
  // diagnostics once the fault is repaired (level 3 for a flapping node).
  double node_faults_per_minute = 0.0;
  DurationMs node_fault_min_ms = 5000;
  DurationMs node_fault_max_ms = 60000;
};

struct WorkloadOptions {
  std::size_t clients = 3;
  double submits_per_minute = 6.0;  // 0: only what a scenario submits by hand
  double cancel_probability = 0.05;  // per accepted job, a cancel follows after a drawn delay
  // Per accepted job, a get_job follows within 10 minutes, often once the coordinator has let
  // the job go: every job accepted must be read back, as stored.
  double read_back_probability = 0.2;
  // Run reports the ci client records (qualification_run records, kept in the coordinator's
  // store only), each rewritten up to 3 times as its run goes and read back by key or listed:
  // every acknowledged version must read back, after restarts too.
  double run_reports_per_minute = 0.0;
  DurationMs job_duration_min_ms = 1000;
  DurationMs job_duration_max_ms = 120000;
  double job_failure_probability = 0.1;   // per attempt
  double job_overrun_probability = 0.05;  // the job runs past its timeout
  std::uint32_t max_attempts_max = 3;
  // Developer leases (request_lease, submit_in_lease, release_lease) from developer clients.
  double lease_requests_per_minute = 0.0;
  // A workload told it is preempted checkpoints and exits within its grace; the rest are
  // cancelled when the grace ends.
  double preempt_checkpoint_probability = 0.8;
  // How often the lab engineer looks for repaired quarantined nodes to run diagnostics on.
  DurationMs lab_round_ms = 15000;
};

struct ClusterShape {
  std::size_t nodes = 4;
  std::vector<std::string> revisions;  // one per node
  std::uint32_t chips_per_node = 8;
  std::uint32_t numa_nodes = 2;  // chips are split evenly
};

struct SimOptions {
  std::uint64_t seed = 1;
  // The wall clock the cores see at simulated time 0 (2026-01-05 09:00 UTC). Every time in
  // this API, in logs and in violations is simulated time since then.
  TimeMs start_wall_ms = 1767603600000;
  ClusterShape shape;
  FaultOptions faults;
  WorkloadOptions workload;
  coordinator::CoordinatorKnobs coordinator_knobs;
  agent::SessionKnobs agent_knobs;
  // Faults and new submissions stop after this; then the quiet tail runs until every job is
  // terminal, or fails the run when it has taken quiet_tail_max_ms plus twice the time the
  // whole cluster needs for the work still outstanding when it began (a backlog cannot drain
  // any faster).
  DurationMs fault_period_ms = 3 * kMinuteMs;
  DurationMs quiet_tail_max_ms = 30 * kMinuteMs;
  // How late the coordinator may notice a silent node or an overdue job: one tick of the real
  // shell's poll loop.
  DurationMs tick_allowance_ms = 200;
  // Also check the agents' side: no chip runs two simulated processes at once.
  bool check_physical_chips = true;
  bool record_log = false;
  // Also log every message delivered (large; for following one seed by hand).
  bool log_messages = false;
};

// Everything about a run drawn from its seed: cluster shape, knobs, fault rates, workload.
// Tests start from this and override what a scenario pins down.
SimOptions options_from_seed(std::uint64_t seed, DurationMs fault_period_ms = 3 * kMinuteMs);

struct Violation {
  std::uint64_t seed = 0;
  DurationMs fault_period_ms = 0;
  std::uint64_t step = 0;
  TimeMs time_ms = 0;
  std::string invariant;

  std::string describe() const;  // one line, ending with the --seed=N that reproduces it
};

struct RunSummary {
  std::uint64_t seed = 0;
  std::uint64_t steps = 0;  // events processed
  TimeMs simulated_ms = 0;
  std::size_t nodes = 0;
  std::size_t jobs_submitted = 0;  // accepted by the coordinator
  std::size_t jobs_succeeded = 0;
  std::size_t jobs_failed = 0;  // failed or timed out
  std::size_t jobs_cancelled = 0;
  std::size_t jobs_lost = 0;
  std::size_t agent_crashes = 0;
  std::size_t coordinator_crashes = 0;
  std::size_t partitions = 0;
  std::size_t node_faults = 0;
  std::size_t preemption_notices = 0;  // job_preempt messages that reached an agent's workload
  std::size_t leases_requested = 0;
  std::size_t messages_sent = 0;
  std::size_t messages_dropped = 0;
  std::size_t messages_duplicated = 0;
  // Times an agent started a process on a chip another of its processes still held.
  std::size_t physical_chip_overlaps = 0;
  std::uint64_t log_digest = 0;  // FNV-1a of the log lines, recorded or not
  std::optional<Violation> violation;

  std::string describe() const;
};

// What a save to the coordinator's store holds.
enum class StoredKind { node, job, record, lease, audit };

class Simulation {
 public:
  explicit Simulation(SimOptions options);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // The fault period, then the quiet tail; stops at the first violated invariant.
  RunSummary run();

  // Pieces of run() for focused scenarios. Every scheduling call takes an absolute simulated
  // time; node and client are indexes into the cluster shape and the client list.
  void run_until(TimeMs until);
  // Stops faults and submissions, heals the network and node faults, and runs until every job
  // is terminal and every lease has ended.
  void run_quiet_tail();
  void submit(TimeMs at, std::size_t client, protocol::SubmitJob job);
  void cancel(TimeMs at, std::size_t client, std::uint64_t job_id);
  void crash_coordinator(TimeMs at, DurationMs down_ms);
  void crash_agent(TimeMs at, std::size_t node, DurationMs down_ms);
  void partition(TimeMs at, std::size_t node, DurationMs duration_ms);
  void node_fault(TimeMs at, std::size_t node, DurationMs duration_ms);
  // Any client request: request_lease, release_lease, submit_in_lease, drain_node, ...
  void client_send(TimeMs at, std::size_t client, protocol::Body body);
  // The network loses the first message of this type (a protocol type name, e.g.
  // "job_finished") that the node's agent sends at or after `from`.
  void drop_next_from_agent(TimeMs from, std::size_t node, std::string type);
  // The store fails the first save of this kind at or after `from`: the coordinator stops, as
  // the real one does, and its supervisor restarts it `down_ms` later.
  void fail_next_save(TimeMs from, StoredKind kind, DurationMs down_ms);

  TimeMs now() const;
  const std::optional<Violation>& violation() const;
  RunSummary summary() const;
  const std::vector<std::string>& log() const;  // empty unless options.record_log
  // The live coordinator, or nullptr while it is down.
  const coordinator::CoordinatorCore* coordinator() const;
  coordinator::Snapshot store() const;  // what a restart would recover
  std::vector<std::uint64_t> accepted_jobs() const;  // ids the coordinator sent job_accepted for
  std::size_t acknowledged_results() const;  // job_finished_ack sent for a stored terminal result
  std::string node_id(std::size_t node) const;
  // Clients: options.workload.clients of kinds ci, developer, ops in turn ("ci-0", "dev-1",
  // "ops-2", ...), then one lab client that runs diagnostics.
  std::size_t clients() const;
  const SimOptions& options() const;

 private:
  struct World;
  std::unique_ptr<World> world_;
};

// Runs one seed with options_from_seed(seed, fault_period_ms).
RunSummary run_seed(std::uint64_t seed, DurationMs fault_period_ms, bool record_log = false,
                    std::vector<std::string>* log = nullptr);

}  // namespace kiln::sim::cluster
