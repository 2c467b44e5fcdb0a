// The clients and the faults: what they send, when, and the events that drive the world.
#include "sim/cluster/world.h"

#include <nlohmann/json.hpp>

#include "records/change.h"
#include "records/run_request.h"

namespace kiln::sim::cluster {

void Simulation::World::client_send(std::size_t client, protocol::Body body) {
  if (!coordinator) {
    ++counters.messages_sent;
    ++counters.messages_dropped;
    return;
  }
  send(Endpoint{Endpoint::Kind::client, client, 0}, coordinator_endpoint(), std::move(body),
       clients[client].next_message_id++, 0);
}

protocol::SubmitJob Simulation::World::draw_job(std::size_t client) {
  const WorkloadOptions& w = options.workload;
  protocol::SubmitJob s;
  static const std::vector<std::uint32_t> kChips = {1, 1, 1, 1, 2, 2, 2, 4, 4, 8};
  s.workload = pick(workload_rng, cluster_workloads());
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

void Simulation::World::deliver_to_client(std::size_t client, const protocol::Envelope& m) {
  if (client == 0 && report_answered(m.header.corr, m.body)) return;
  if (auto get = gets_awaited.find({client, m.header.corr}); get != gets_awaited.end()) {
    check_job_read_back(get->second, m.body);
    gets_awaited.erase(get);
    return;
  }
  if (const auto* acc = std::get_if<protocol::JobAccepted>(&m.body)) {
    if (!quiet && client != lab_client && workload_rng.bernoulli(options.workload.cancel_probability)) {
      schedule(between(workload_rng, 0, 60000), ev::ClientCancel{client, acc->job_id});
    }
    if (!quiet && workload_rng.bernoulli(options.workload.read_back_probability)) {
      schedule(between(workload_rng, 0, 600000), ev::ClientGetJob{client, acc->job_id});
    }
  } else if (const auto* granted = std::get_if<protocol::LeaseGranted>(&m.body)) {
    lease_reply(client, granted->lease);
  } else if (const auto* pending = std::get_if<protocol::LeasePending>(&m.body)) {
    lease_reply(client, pending->lease);
  }
}

// A developer with a lease runs a job in it now and then, and releases it early or lets
// it expire.
void Simulation::World::lease_reply(std::size_t client, const protocol::LeaseSummary& lease) {
  if (quiet || options.workload.lease_requests_per_minute <= 0) return;  // scenarios script their own
  if (lease.state == protocol::LeaseState::granted && workload_rng.bernoulli(0.5)) {
    schedule(between(workload_rng, 100, 5000), ev::ClientSubmitInLease{client, lease.lease_id, lease.chips});
  }
  if (workload_rng.bernoulli(0.5)) {
    schedule(between(workload_rng, 5000, static_cast<DurationMs>(lease.duration_ms)),
             ev::ClientReleaseLease{client, lease.lease_id});
  }
}

void Simulation::World::schedule_next_fault() {
  const FaultOptions& f = options.faults;
  const double total = f.agent_crashes_per_minute + f.coordinator_crashes_per_minute + f.partitions_per_minute +
                       f.node_faults_per_minute;
  if (total <= 0 || quiet) return;
  schedule(exponential_ms(fault_rng, total), ev::NextFault{});
}

void Simulation::World::inject_fault() {
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

void Simulation::World::start_node_fault(std::size_t node, DurationMs duration_ms) {
  SimAgent& a = agents[node];
  a.faulty_until = std::max(a.faulty_until, now + duration_ms);
  ++counters.node_faults;
  log("sim", fmt::format("node {} develops a chip fault for {} ms", a.identity.node_id, duration_ms));
}

void Simulation::World::start_partition(std::size_t node, DurationMs duration_ms) {
  SimAgent& a = agents[node];
  a.partitioned_until = std::max(a.partitioned_until, now + duration_ms);
  ++counters.partitions;
  log("sim", fmt::format("node {} cut off from the coordinator for {} ms", a.identity.node_id, duration_ms));
}

void Simulation::World::handle(ev::Deliver& e) {
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

void Simulation::World::handle(ev::CoordinatorTick&) {
  if (!coordinator || coordinator_tick_at != now) return;  // superseded, or its coordinator died
  coordinator_tick_at.reset();
  coordinator->on_tick(wall());
  drain_coordinator();
}

void Simulation::World::handle(ev::AgentTick& e) {
  SimAgent& a = agents[e.node];
  if (!a.core || a.tick_at != now) return;
  a.tick_at.reset();
  a.core->on_tick(wall());
  drain_agent(e.node);
}

void Simulation::World::handle(ev::CoordinatorCrash& e) {
  if (!coordinator) return;
  if (e.mid_step) {
    crash_after_actions = 1;
    pending_crash_down_ms = e.down_ms;
  } else {
    crash_coordinator_now(e.down_ms);
  }
}

void Simulation::World::handle(ev::AgentRestart& e) {
  if (agents[e.node].core) return;
  log("sim", fmt::format("agent {} restarts", agents[e.node].identity.node_id));
  start_agent(e.node);
}

void Simulation::World::handle(ev::ClientSubmit& e) {
  log(clients[e.client].key_name, fmt::format("submits {} on {} chips (rev '{}', {} attempts)", e.job.workload,
                                              e.job.chips, e.job.hardware_revision, e.job.max_attempts));
  client_send(e.client, e.job);
}

void Simulation::World::handle(ev::ClientCancel& e) {
  log(clients[e.client].key_name, fmt::format("cancels job {}", e.job_id));
  client_send(e.client, protocol::CancelJob{e.job_id});
}

void Simulation::World::handle(ev::ClientGetJob& e) {
  log(clients[e.client].key_name, fmt::format("reads job {}", e.job_id));
  if (coordinator) gets_awaited[{e.client, clients[e.client].next_message_id}] = e.job_id;
  client_send(e.client, protocol::GetJob{e.job_id});
}

// Every job the coordinator accepted can be read back however old, and an ended one as stored.
void Simulation::World::check_job_read_back(std::uint64_t job_id, const protocol::Body& answer) {
  if (const auto* error = std::get_if<protocol::ErrorReply>(&answer)) {
    return fail(fmt::format("get_job of job {}, which the coordinator accepted, was refused: {}: {}", job_id,
                            error->code, error->message));
  }
  const auto* detail = std::get_if<protocol::JobDetail>(&answer);
  if (!detail || detail->job.job_id != job_id) {
    return fail(fmt::format("get_job of job {} was answered with another job or another message", job_id));
  }
  const auto stored = stored_jobs.find(job_id);
  if (protocol::is_terminal(detail->job.state) &&
      (stored == stored_jobs.end() || stored->second.summary.state != detail->job.state)) {
    return fail(fmt::format("get_job of job {} says it ended {}, which the store does not hold", job_id,
                            protocol::enum_name(detail->job.state)));
  }
}

namespace {

std::string report_key(std::uint64_t run) { return fmt::format("sim-run-{}", run); }

// The version a report's document says it is, 0 when it says none.
std::uint32_t report_version(const protocol::RecordEntry& record) {
  const auto json = nlohmann::json::parse(record.document, nullptr, false);
  return json.is_object() ? json.value("version", 0u) : 0u;
}

// The change and the bundle every simulated run is requested on.
const qualification::Change& report_change() {
  static const qualification::Change change = [] {
    qualification::Change c;
    c.id = "sim-c1";
    c.layer = qualification::Layer::kernels;
    c.owner_team = "kernels-team";
    c.merged_at_ms = 1767600000000;
    return c;
  }();
  return change;
}

const qualification::Bundle& report_bundle() {
  static const qualification::Bundle bundle = *qualification::build_bundle_at({report_change()}, 0);
  return bundle;
}

}  // namespace

void Simulation::World::put_record_awaited(const protocol::PutRecord& put, RecordPut awaited) {
  if (coordinator) report_puts_awaited[clients[0].next_message_id] = std::move(awaited);
  client_send(0, put);
}

void Simulation::World::handle(ev::NextRunReport&) {
  if (quiet) return;
  schedule(exponential_ms(report_rng, options.workload.run_reports_per_minute), ev::NextRunReport{});
  if (!report_bundle_acknowledged) {
    // Recorded again until acknowledged: the change a second time is compared with the stored one.
    log(clients[0].key_name, "records change sim-c1");
    put_record_awaited({protocol::RecordKind::change, report_change().id, qualification::to_json(report_change()).dump()},
                       RecordPut{protocol::RecordKind::change});
    return;
  }
  const std::uint64_t run = next_report_run++;
  log(clients[0].key_name, fmt::format("requests run {}", report_key(run)));
  qualification::RunRequest request;
  request.run_id = report_key(run);
  request.bundle_id = report_bundle().id;
  put_record_awaited({protocol::RecordKind::run_request, request.run_id, qualification::to_json(request).dump()},
                     RecordPut{protocol::RecordKind::run_request, run});
}

// Client 0 is the ci client, which records runs.
void Simulation::World::handle(ev::ClientPutReport& e) {
  const std::string key = report_key(e.run);
  log(clients[0].key_name, fmt::format("records report {} version {}", key, e.version));
  const nlohmann::json document = {{"run_id", key}, {"version", e.version}, {"finished", e.version == 4}};
  put_record_awaited({protocol::RecordKind::qualification_run, key, document.dump()},
                     RecordPut{protocol::RecordKind::qualification_run, e.run, e.version});
}

void Simulation::World::handle(ev::ClientClaim& e) {
  const DurationMs lease_ms = between(report_rng, 5000, 30000);
  log(clients[0].key_name, fmt::format("{} claims run {} for {} ms", e.owner, report_key(e.run), lease_ms));
  auto& sent = claims_sent[e.run];
  sent.push_back(ClaimSent{e.owner, wall(), lease_ms});
  RecordPut awaited{protocol::RecordKind::run_claim, e.run};
  awaited.claim = sent.size() - 1;
  awaited.attempt = e.attempt;
  put_record_awaited({protocol::RecordKind::run_claim, report_key(e.run),
                      qualification::to_json(qualification::RunClaim{report_key(e.run), e.owner, lease_ms, 0}).dump()},
                     awaited);
}

// A claim is refused while another owner's holds, and taken otherwise. Another owner's claim
// surely held when it was acknowledged before this one was sent, that owner sent nothing since
// that could have changed its expiry (a renewal), and it expires (counted from when it was sent,
// with a second's margin for the clocks) after this one was acknowledged: no claim may be taken
// then.
void Simulation::World::claim_answered(const RecordPut& put, const protocol::ErrorReply* error) {
  auto& sent = claims_sent[put.run];
  ClaimSent& claim = sent.at(put.claim);
  if (error && error->code != to_string(Errc::conflict)) {
    return fail(fmt::format("{}'s claim of {} was refused: {}: {}", claim.owner, report_key(put.run), error->code,
                            error->message));
  }
  if (error) {
    claim.refused = true;
  } else {
    for (std::size_t i = 0; i < sent.size(); ++i) {
      const ClaimSent& other = sent[i];
      if (other.owner == claim.owner || other.acknowledged_wall_ms == 0 ||
          other.acknowledged_wall_ms >= claim.sent_wall_ms) {
        continue;
      }
      const bool sent_since = std::any_of(sent.begin() + static_cast<std::ptrdiff_t>(i) + 1, sent.end(),
                                          [&](const ClaimSent& later) { return later.owner == other.owner && !later.refused; });
      if (!sent_since && wall() + 1000 < other.sent_wall_ms + other.lease_ms) {
        return fail(fmt::format("{} claimed {} while {}'s claim, taken at {} for {} ms, still held", claim.owner,
                                report_key(put.run), other.owner, other.acknowledged_wall_ms, other.lease_ms));
      }
    }
    claim.acknowledged_wall_ms = wall();
  }
// Renew a held claim before it expires; try a refused one again later.
  if (put.attempt < 6) {
    const DurationMs after = error ? between(report_rng, 1000, claim.lease_ms)
                                   : between(report_rng, claim.lease_ms / 4, claim.lease_ms * 3 / 4);
    schedule(after, ev::ClientClaim{put.run, claim.owner, put.attempt + 1});
  }
}

void Simulation::World::handle(ev::ClientReadReports& e) {
  log(clients[0].key_name, e.list ? fmt::format("lists the run reports{}", e.newest_first ? ", newest first" : "")
                                   : "reads report " + report_key(e.run));
  if (coordinator) {
    report_reads_awaited[clients[0].next_message_id] = ReportRead{e.run, e.list, e.newest_first, reports_acknowledged};
  }
  if (e.list) {
    client_send(0, protocol::ListRecords{protocol::RecordKind::qualification_run, 1000, 0, 0, e.newest_first});
  } else {
    client_send(0, protocol::GetRecord{protocol::RecordKind::qualification_run, report_key(e.run)});
  }
}

bool Simulation::World::report_answered(std::uint64_t corr, const protocol::Body& answer) {
  const auto* error = std::get_if<protocol::ErrorReply>(&answer);
  const auto violated = [&](std::string invariant) {
    fail(std::move(invariant));
    return true;
  };
  if (auto found = report_puts_awaited.find(corr); found != report_puts_awaited.end()) {
    const RecordPut put = std::move(found->second);
    report_puts_awaited.erase(found);
    if (put.kind == protocol::RecordKind::run_claim) {
      claim_answered(put, error);
      return true;
    }
    if (error) {
      return violated(fmt::format("{} of {} was refused: {}: {}", protocol::enum_name(put.kind),
                                  put.run == 0 ? std::string("the runs' bundle") : report_key(put.run), error->code,
                                  error->message));
    }
    if (put.kind == protocol::RecordKind::change) {
      log(clients[0].key_name, "records bundle " + report_bundle().id.substr(0, 12));
      put_record_awaited({protocol::RecordKind::bundle, report_bundle().id, qualification::to_json(report_bundle()).dump()},
                         RecordPut{protocol::RecordKind::bundle});
      return true;
    }
    if (put.kind == protocol::RecordKind::bundle) {
      report_bundle_acknowledged = true;
      return true;
    }
    if (put.kind == protocol::RecordKind::run_request) {
      schedule(0, ev::ClientPutReport{put.run, 1});
      for (const char* owner : {"q1/1", "q2/2"}) {
        schedule(between(report_rng, 0, 30000), ev::ClientClaim{put.run, owner, 1});
      }
      return true;
    }
    const std::uint64_t run = put.run;
    const std::uint32_t version = put.version;
    reports_acknowledged[run] = std::max(reports_acknowledged[run], version);
    // The next version comes after any duplicate of this put has arrived (network delays are
    // under a second), so a late duplicate never rewrites a newer version.
    if (version < 4 && report_rng.bernoulli(0.6)) {
      schedule(between(report_rng, 1000, 300000), ev::ClientPutReport{run, version + 1});
    }
    if (report_rng.bernoulli(0.7)) {
      const bool list = report_rng.bernoulli(0.3);
      schedule(between(report_rng, 0, 600000), ev::ClientReadReports{run, list, list && report_rng.bernoulli(0.5)});
    }
    return true;
  }
  auto read = report_reads_awaited.find(corr);
  if (read == report_reads_awaited.end()) return false;
  const ReportRead asked = std::move(read->second);
  report_reads_awaited.erase(read);
  if (error) {
    return violated(fmt::format("{} was refused: {}: {}",
                                asked.list ? "list_records of the run reports" : "get_record of " + report_key(asked.run),
                                error->code, error->message));
  }
  if (!asked.list) {
    const auto* record = std::get_if<protocol::RecordEntry>(&answer);
    if (!record || record->key != report_key(asked.run)) {
      return violated(fmt::format("get_record of {} was answered with another record or message", report_key(asked.run)));
    }
    if (report_version(*record) < asked.acknowledged.at(asked.run)) {
      return violated(fmt::format("get_record of {} read version {}, but version {} had been acknowledged", record->key,
                                  report_version(*record), asked.acknowledged.at(asked.run)));
    }
    return true;
  }
  const auto* list = std::get_if<protocol::RecordList>(&answer);
  if (!list) return violated("list_records of the run reports was answered with another message");
  std::optional<std::uint64_t> last_seq;
  std::set<std::string> listed;
  for (const auto& record : list->records) {
    const bool in_order = !last_seq || (asked.newest_first ? record.seq < *last_seq : record.seq > *last_seq);
    if (!in_order || !listed.insert(record.key).second) {
      return violated(fmt::format("list_records of the run reports{} listed {} out of seq order or twice",
                                  asked.newest_first ? " (newest first)" : "", record.key));
    }
    last_seq = record.seq;
    const std::uint64_t run = std::stoull(record.key.substr(record.key.rfind('-') + 1));
    auto acked = asked.acknowledged.find(run);
    if (acked != asked.acknowledged.end() && report_version(record) < acked->second) {
      return violated(fmt::format("list_records listed {} at version {}, but version {} had been acknowledged",
                                  record.key, report_version(record), acked->second));
    }
  }
  if (!list->more) {
    for (const auto& [run, version] : asked.acknowledged) {
      if (!listed.count(report_key(run))) {
        return violated(fmt::format("list_records of the run reports left out {}, acknowledged at version {}",
                                    report_key(run), version));
      }
    }
  }
  return true;
}

void Simulation::World::handle(ev::ProbeDone& e) {
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

void Simulation::World::handle(ev::ClientRequestLease& e) {
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

void Simulation::World::handle(ev::ClientReleaseLease& e) {
  log(clients[e.client].key_name, fmt::format("releases lease L{}", e.lease_id));
  client_send(e.client, protocol::ReleaseLease{e.lease_id});
}

void Simulation::World::handle(ev::ClientSubmitInLease& e) {
  protocol::SubmitInLease s;
  s.lease_id = e.lease_id;
  s.job = draw_job(e.client);
  s.job.chips = std::min(s.job.chips, e.chips);
  s.job.hardware_revision.clear();
  log(clients[e.client].key_name, fmt::format("submits {} on {} chips in lease L{}", s.job.workload, s.job.chips,
                                              e.lease_id));
  client_send(e.client, s);
}

void Simulation::World::handle(ev::ClientSend& e) {
  log(clients[e.client].key_name, fmt::format("sends {}", protocol::type_name(e.body)));
  client_send(e.client, std::move(e.body));
}

void Simulation::World::handle(ev::NextLeaseRequest&) {
  if (quiet) return;
  ev::ClientRequestLease request{*developer_client()};
  handle(request);
  schedule(exponential_ms(workload_rng, options.workload.lease_requests_per_minute), ev::NextLeaseRequest{});
}

// The lab engineer looks at `kiln nodes`: a quarantined node whose fault is repaired gets
// the diagnostics that return it (again, if a previous run got lost).
void Simulation::World::handle(ev::LabRound&) {
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
    // The level that brings it back, as `kiln nodes` shows it: what its quarantine's cause needs.
    const std::uint32_t level = std::max(2u, node->second.summary.release_diag_level);
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

void Simulation::World::handle(ev::NextSubmission&) {
  if (quiet) return;
  const std::size_t client = workload_rng.below(lab_client);  // the lab only runs diagnostics
  ev::ClientSubmit submit{client, draw_job(client)};
  handle(submit);
  schedule(exponential_ms(workload_rng, options.workload.submits_per_minute), ev::NextSubmission{});
}

void Simulation::World::handle(ev::NextFault&) {
  if (quiet) return;
  inject_fault();
  schedule_next_fault();
}

}  // namespace kiln::sim::cluster
