// Drives the coordinator core the way the shell does, with the shell's action interpreter, and
// keeps what it sent and saved.
#pragma once

#include <doctest/doctest.h>

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "coordinator/core/coordinator_core.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/server/action_interpreter.h"

namespace kiln::coordinator::testing {

// The core's actions go through the shell's interpreter into memory.
struct Harness : CoordinatorIo {
  CoordinatorCore core;
  std::vector<action::ToAgent> to_agents;
  std::vector<action::ToClient> to_clients;
  std::vector<JobRecord> saved_jobs;
  std::vector<protocol::RecordEntry> saved_records;
  // The latest saved version of each record: what the store would give back at a restart.
  std::map<std::string, NodeRecord> stored_nodes;
  std::map<std::uint64_t, JobRecord> stored_jobs;
  std::map<std::uint64_t, LeaseRecord> stored_leases;
  std::map<std::pair<protocol::RecordKind, std::string>, protocol::RecordEntry> stored_records;
  std::vector<protocol::AuditEntry> audit;
  std::uint64_t next_id = 1;

  CoordinatorKnobs knobs;
  std::size_t recalls = 0;  // jobs read back from the store
  std::size_t record_reads = 0;  // run reports read from the store
  std::optional<std::string> record_read_error;  // set: the store fails to read records, saying this

  explicit Harness(CoordinatorKnobs k = {}, Snapshot snapshot = {}, Now now = 0,
                   std::shared_ptr<const qualification::RiskRegister> waiver_register = nullptr)
      : core(k, snapshot, now, std::move(waiver_register)), knobs(k) {
    // The same database: run reports are read from it.
    for (auto& record : snapshot.records) stored_records[{record.kind, record.key}] = std::move(record);
    drain();
  }

  void drain() { REQUIRE(carry_out_actions(core, *this).has_value()); }

  void send_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) override {
    to_agents.push_back(action::ToAgent{peer, std::move(body), corr});
  }
  void send_to_client(const std::string& client, protocol::Body body, std::uint64_t corr) override {
    to_clients.push_back(action::ToClient{client, std::move(body), corr});
  }
  Status save_node(const NodeRecord& node) override {
    stored_nodes[node.summary.node_id] = node;
    return {};
  }
  Status save_job(const JobRecord& job) override {
    saved_jobs.push_back(job);
    stored_jobs[job.summary.job_id] = job;
    return {};
  }
  Status save_record(const protocol::RecordEntry& record) override {
    saved_records.push_back(record);
    stored_records[{record.kind, record.key}] = record;
    return {};
  }
  Status save_lease(const LeaseRecord& lease) override {
    stored_leases[lease.summary.lease_id] = lease;
    return {};
  }
  Status append_audit(const protocol::AuditEntry& entry) override {
    audit.push_back(entry);
    audit.back().seq = audit.size();
    return {};
  }
  Result<std::optional<JobRecord>> recall_job(std::uint64_t job_id) override {
    ++recalls;
    auto it = stored_jobs.find(job_id);
    if (it == stored_jobs.end()) return std::optional<JobRecord>();
    return std::optional<JobRecord>(it->second);
  }
  Result<std::vector<protocol::RecordEntry>> read_records(
      const std::variant<protocol::GetRecord, protocol::ListRecords>& query) override {
    ++record_reads;
    if (record_read_error) return kiln::fail(Errc::io, *record_read_error);
    return read_from(stored_records, query);
  }
  void log(action::Severity, const std::string&) override {}

  // What a coordinator restarted now would recover from its store.
  Snapshot store() const {
    Snapshot snapshot;
    for (const auto& [id, node] : stored_nodes) snapshot.nodes.push_back(node);
    for (const auto& [id, job] : stored_jobs) snapshot.jobs.push_back(job);
    // Every rerun candidate: a restarted core lets go of those past their window itself.
    snapshot.jobs = jobs_held_at_start(std::move(snapshot.jobs), knobs.ended_jobs_in_memory,
                                       std::numeric_limits<TimeMs>::min());
    for (const auto& [id, lease] : stored_leases) snapshot.leases.push_back(lease);
    for (const auto& [key, record] : stored_records) snapshot.records.push_back(record);
    return snapshot;
  }
  void agent(const std::string& peer, const std::string& key, protocol::Body body, Now now) {
    core.on_agent_message(peer, Caller{key, protocol::Role::agent}, protocol::make_envelope(std::move(body), next_id++),
                          now);
    drain();
  }
  // Every client request gets exactly one reply; this returns it.
  protocol::Body client(const std::string& key, protocol::Role role, protocol::Body body, Now now) {
    const std::size_t before = to_clients.size();
    core.on_client_message("c-" + key, Caller{key, role}, protocol::make_envelope(std::move(body), next_id++), now);
    drain();
    REQUIRE(to_clients.size() > before);
    return to_clients[before].body;
  }
  void tick(Now now) {
    core.on_tick(now);
    drain();
  }
  template <class T>
  std::vector<T> agent_bodies(const std::string& peer) const {
    std::vector<T> out;
    for (const auto& a : to_agents) {
      if (a.peer == peer) {
        if (auto* b = std::get_if<T>(&a.body)) out.push_back(*b);
      }
    }
    return out;
  }
  template <class T>
  std::vector<T> client_bodies(const std::string& key) const {
    std::vector<T> out;
    for (const auto& c : to_clients) {
      if (c.client == "c-" + key) {
        if (auto* b = std::get_if<T>(&c.body)) out.push_back(*b);
      }
    }
    return out;
  }
  std::uint64_t submit(const std::string& key, protocol::Role role, protocol::SubmitJob job, Now now) {
    protocol::Body reply = client(key, role, std::move(job), now);
    REQUIRE_MESSAGE(std::holds_alternative<protocol::JobAccepted>(reply),
                    (std::holds_alternative<protocol::ErrorReply>(reply) ? std::get<protocol::ErrorReply>(reply).message
                                                                          : ""));
    return std::get<protocol::JobAccepted>(reply).job_id;
  }
  const JobRecord& job(std::uint64_t id) const { return core.jobs().at(id); }
  const protocol::Body& last_client_reply() const { return to_clients.back().body; }
};

// The preemption grace of knobs_with_fast_preemption.
constexpr TimeMs kGraceMs = 60000;

// Knobs under which presubmit preempts experiments as soon as it cannot start at once, with a
// minute's grace, and nodes stay alive through long waits.
inline CoordinatorKnobs knobs_with_fast_preemption() {
  CoordinatorKnobs knobs;
  knobs.heartbeat_interval_ms = 1000;
  knobs.liveness_missed_beats = 1000;
  knobs.scheduler.grace_ms = kGraceMs;
  knobs.scheduler.target_start_latency_ms[scheduler::rank(scheduler::RequestClass::presubmit)] = 0;
  return knobs;
}

// An agent's report that attempt `attempt` of job `id` ended.
inline protocol::JobFinished finished(std::uint64_t id, std::uint32_t attempt, protocol::JobOutcome outcome,
                                      std::string result = "") {
  protocol::JobFinished fin;
  fin.job_id = id;
  fin.attempt = attempt;
  fin.outcome = outcome;
  fin.result = std::move(result);
  return fin;
}

// An 8-chip node, chips 0-3 on NUMA node 0 and 4-7 on NUMA node 1.
inline protocol::Hello hello(const std::string& node, const std::string& rev,
                             std::vector<std::uint64_t> running = {}) {
  protocol::Hello h;
  h.node_id = node;
  h.hardware_revision = rev;
  h.agent_version = "0.1.0";
  h.protocol_versions = {1};
  for (std::uint32_t i = 0; i < 8; ++i) {
    h.chips.push_back(protocol::ChipInfo{i, node + "-" + std::to_string(i), "1.0", i / 4, true});
  }
  h.running_jobs = std::move(running);
  h.workloads = {"model", "sleep", "smoke"};
  return h;
}

// A probe report failing on chip 0's link.
inline protocol::HealthReport failing_probe() {
  protocol::HealthReport report;
  report.verdict = protocol::HealthStatus::fail;
  report.checks.push_back(protocol::HealthCheck{"link", 0, protocol::HealthStatus::fail, "link_down", "interconnect",
                                                "link down", "reseat the cable"});
  return report;
}

// A kiln.diag job's result: diagnostics of `level` passed.
inline protocol::JobFinished diag_result(std::uint64_t job_id, int level) {
  protocol::JobFinished fin;
  fin.job_id = job_id;
  fin.outcome = protocol::JobOutcome::succeeded;
  fin.result = fmt::format(R"({{"level": {}, "verdict": "pass"}})", level);
  return fin;
}

// A developer's lease of `chips` on one node (0: whole nodes, set r.nodes).
inline protocol::RequestLease lease_request(std::uint32_t chips, std::string rev = "",
                                            std::uint64_t duration_ms = 2 * 3600000) {
  protocol::RequestLease r;
  r.chips = chips;
  r.hardware_revision = std::move(rev);
  r.duration_ms = duration_ms;
  return r;
}

// A job that sleeps for ten minutes on `chips` of one node.
inline protocol::SubmitJob sleep_job(std::uint32_t chips, protocol::PriorityClass cls = protocol::PriorityClass::experiment,
                                     std::uint32_t timeout_ms = 3600000) {
  protocol::SubmitJob s;
  s.workload = "sleep";
  s.args = {"600"};
  s.chips = chips;
  s.priority_class = cls;
  s.timeout_ms = timeout_ms;
  return s;
}

}  // namespace kiln::coordinator::testing
