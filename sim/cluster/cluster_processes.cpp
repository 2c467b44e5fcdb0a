// The agents and the processes of their jobs: starts, ends, preemption and cancellation,
// agent crashes and restarts.
#include "sim/cluster/world.h"

namespace kiln::sim::cluster {

void Simulation::World::start_agent(std::size_t node) {
  SimAgent& a = agents[node];
  a.core = std::make_unique<agent::AgentCore>(a.identity, options.agent_knobs);
  ++a.incarnation;
  a.core->on_start(wall());
  drain_agent(node);
}

void Simulation::World::drain_agent(std::size_t node) {
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
                          std::move(act.body), act.id, act.corr);
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

void Simulation::World::start_process(std::size_t node, const protocol::JobStart& job) {
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

void Simulation::World::notify_preemption(std::size_t node, std::uint64_t job_id, std::uint64_t grace_ms) {
  ++counters.preemption_notices;
  auto it = agents[node].processes.find(job_id);
  if (it == agents[node].processes.end() || it->second.checkpointing) return;
  if (!process_rng.bernoulli(options.workload.preempt_checkpoint_probability)) return;  // ignores the notice
  it->second.checkpointing = true;
  const DurationMs limit = std::min<DurationMs>(static_cast<DurationMs>(grace_ms), 30000);
  schedule(between(process_rng, 0, limit), ev::ProcessEnd{node, it->second.process_id});
}

void Simulation::World::cancel_process(std::size_t node, std::uint64_t job_id) {
  auto it = agents[node].processes.find(job_id);
  if (it == agents[node].processes.end() || it->second.cancelling) return;
  it->second.cancelling = true;
  // The workload gets a signal and takes a moment to stop.
  schedule(between(process_rng, 0, 2000), ev::ProcessEnd{node, it->second.process_id});
}

void Simulation::World::end_process(std::size_t node, std::uint64_t process_id) {
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

void Simulation::World::crash_agent_now(std::size_t node, DurationMs down_ms) {
  SimAgent& a = agents[node];
  if (!a.core) return;
  a.core.reset();
  a.processes.clear();  // its workloads die with it
  a.tick_at.reset();
  ++counters.agent_crashes;
  log("sim", fmt::format("agent {} crashed; restarts in {} ms", a.identity.node_id, down_ms));
  schedule(down_ms, ev::AgentRestart{node});
}

}  // namespace kiln::sim::cluster
