// The jobs, health probes and artifact fetches the agent's shell starts as processes, and what it
// reports when they end.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "agent/artifacts/artifact_cache.h"
#include "agent/health/diagnostics.h"
#include "agent/host/job_dirs.h"
#include "agent/host/topology.h"
#include "agent/shell/agent_shell_loop.h"
#include "agent/shell/job_outputs.h"
#include "common/process/cgroup.h"
#include "common/protocol/artifacts.h"
#include "common/protocol/json.h"
#include "common/protocol/repair.h"
#include "common/text/utf8.h"

namespace kiln::agent::detail {
namespace {

namespace fs = std::filesystem;

bench::BenchmarkSettings bench_settings(const protocol::BenchmarkSpec& spec) {
  bench::BenchmarkSettings s;
  s.warmup_min = spec.warmup_min;
  s.warmup_max = spec.warmup_max;
  s.steady_window = spec.steady_window;
  s.steady_tolerance = spec.steady_tolerance_ppm / 1e6;
  s.repeats = spec.repeats;
  return s;
}

}  // namespace

void Shell::start_probe() {
  ProcessSpec spec;
  spec.program = self_;
  spec.args = {"--config", config_.config_path, "probe", "--json"};
  if (!unanswered_chips_.empty()) {
    spec.args.push_back(fmt::format("--skip-chips={}", fmt::join(unanswered_chips_, ",")));
  }
  spec.work_dir = (fs::path(config_.work_dir) / "probe").string();
  // The probe runs each check under probe_timeout_ms; this bounds the whole run.
  spec.timeout_ms = config_.knobs.probe_timeout_ms * 2 + 5 * kSecondMs;
  spec.output_limit_bytes = protocol::kOutputTail.max_len;
  spec.kill_grace_ms = config_.knobs.kill_grace_ms;
  auto id = runner_.start(spec);
  if (!id) {
    core_.on_probe_result(probe_failure("probe_not_started", id.error().message), wall_clock_ms(),
                          monotonic_clock_ms());
    return;
  }
  own_processes_[*id] = OwnProcess{OwnWork::probe, -1, {}};
  probe_started_wall_ms_ = wall_clock_ms();
}

protocol::HealthReport Shell::probe_failure(const std::string& reason, const std::string& message) {
  protocol::HealthReport report;
  report.verdict = protocol::HealthStatus::fail;
  report.checks.push_back(protocol::HealthCheck{"probe", -1, protocol::HealthStatus::fail, reason, "software",
                                                message.substr(0, protocol::kMessageText.max_len),
                                                "run kiln-agent probe on the host to see why"});
  return report;
}

void Shell::own_process_ended(const OwnProcess& own, const ProcessExit& exit) {
  if (own.kind == OwnWork::local_diag) {
    core_.release_chips(own.chip_owner);
    local_->reply(own.connection, exit.outcome == ProcessOutcome::exited ? exit.exit_code : 2,
                  exit.output_tail + (exit.outcome == ProcessOutcome::exited ? "" : exit.detail + "\n"));
    return;
  }
  protocol::HealthReport report;
  auto doc = nlohmann::json::parse(exit.output_tail, nullptr, /*allow_exceptions=*/false);
  auto parsed = doc.is_object() ? protocol::from_json<protocol::HealthReport>(doc)
                                : Result<protocol::HealthReport>(fail(Errc::bad_message, "no report"));
  if (exit.outcome == ProcessOutcome::timed_out) {
    report = probe_failure("probe_timed_out", "the health probe did not finish within its deadline: a chip may "
                                              "be wedged");
  } else if (!parsed) {
    report = probe_failure("probe_failed", fmt::format("the health probe could not run: {}", exit.detail));
  } else {
    report = *parsed;
  }
  last_probe_verdict_ = std::string(protocol::enum_name(report.verdict));
  last_probe_checks_ = report.checks;
  last_probe_at_wall_ms_ = probe_started_wall_ms_;
  core_.on_probe_result(report, probe_started_wall_ms_, monotonic_clock_ms());
}

void Shell::collect_finished() {
  for (const ProcessExit& exit : runner_.poll_finished()) {
    if (auto fetch = fetching_.find(exit.id); fetch != fetching_.end()) {
      const protocol::JobStart start = fetch->second;
      fetching_.erase(fetch);
      fetch_by_job_.erase(start.job_id);
      artifacts_fetched(start, exit);
      continue;
    }
    if (auto own = own_processes_.find(exit.id); own != own_processes_.end()) {
      const OwnProcess work = own->second;
      own_processes_.erase(own);
      own_process_ended(work, exit);
      continue;
    }
    auto it = jobs_by_process_.find(exit.id);
    if (it == jobs_by_process_.end()) continue;
    const RunningJob job = it->second;
    jobs_by_process_.erase(it);
    process_by_job_.erase(job.job_id);
    artifacts_in_use_.erase(job.job_id);
    update_telemetry_watch();
    JobEnded ended = ended_from(job, exit);
    if (job.workload == protocol::kInstallWorkload) install_state_ = install_state_after(ended.result);
    core_.on_job_ended(ended, monotonic_clock_ms());
  }
  carry_out_actions();
}

JobEnded Shell::ended_from(const RunningJob& job, const ProcessExit& exit) {
  JobEnded ended;
  ended.job_id = job.job_id;
  ended.duration_ms = static_cast<std::uint64_t>(exit.duration_ms);
  ended.exit_code = exit.exit_code;
  // Whatever the workload printed, binary included: its end, valid UTF-8, within the bound.
  ended.output_tail = text::utf8_tail(exit.output_tail, protocol::kOutputTail.max_len);
  ended.detail = exit.detail;
  switch (exit.outcome) {
    case ProcessOutcome::exited:
      ended.outcome = exit.succeeded() ? protocol::JobOutcome::succeeded : protocol::JobOutcome::failed;
      break;
    case ProcessOutcome::timed_out: ended.outcome = protocol::JobOutcome::timed_out; break;
    case ProcessOutcome::cancelled: ended.outcome = protocol::JobOutcome::cancelled; break;
    case ProcessOutcome::failed_to_start: ended.outcome = protocol::JobOutcome::failed_to_start; break;
  }
  std::error_code ec;
  const auto size = fs::file_size(job.result_file, ec);
  if (!ec) {
    if (size > protocol::kResultDocument.max_len) {
      ended.detail += fmt::format(" (its result file is {} bytes, over the {} byte limit, and was dropped)", size,
                                  protocol::kResultDocument.max_len);
    } else {
      std::ifstream in(job.result_file, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      ended.result = text.str();
    }
  }
  if (exit.outcome == ProcessOutcome::exited) judge_exit(job, exit, ended);
  ended.detail = ended.detail.substr(0, protocol::kMessageText.max_len);
  return ended;
}

// Correctness comes from the result document, not the exit code (docs/workloads.md): the job
// ends succeeded when the document says passed, and failed with exit code 1 and the document when
// it says not passed, whatever the program returned; without a valid document it crashed, and
// what it left is not kept, so that nobody reads it as a verdict.
void Shell::judge_exit(const RunningJob& job, const ProcessExit& exit, JobEnded& ended) {
  auto judged = bench::judge_workload_end(exit.exit_code, ended.result, job.benchmark);
  const auto add_detail = [&ended](const std::string& text) {
    if (!text.empty()) ended.detail = ended.detail.empty() ? text : ended.detail + "; " + text;
  };
  switch (judged.end) {
    case bench::WorkloadEnd::exited:
    case bench::WorkloadEnd::other: return;
    case bench::WorkloadEnd::crashed:
      ended.outcome = protocol::JobOutcome::failed;
      ended.result.clear();
      add_detail(judged.detail);
      return;
    case bench::WorkloadEnd::passed:
    case bench::WorkloadEnd::incorrect: break;
  }
  bool passed = judged.end == bench::WorkloadEnd::passed;
  add_detail(judged.detail);
  // kiln's own comparison of the outputs the document lists, the workload's `passed` its second
  // opinion (docs/workloads.md, "Outputs kiln judges"); a preempted run's outputs are not final.
  nlohmann::json kiln_verdict;
  const bench::WorkloadResult& result = *judged.result;
  if (!result.outputs.empty() && result.status == bench::WorkloadStatus::completed) {
    const fs::path dir = fs::path(job.result_file).parent_path();
    auto verdict = judge_job_outputs(result.outputs, dir, dir / "artifacts", result.dtype, result.passed);
    passed = verdict.passed;
    add_detail(verdict.detail);
    kiln_verdict = std::move(verdict.document);
  }
  ended.outcome = passed ? protocol::JobOutcome::succeeded : protocol::JobOutcome::failed;
  ended.exit_code = passed ? 0 : 1;
  nlohmann::json document = result.document;
  if (job.benchmark) {
    const auto readings = telemetry_.readings(job.chips, job.started_at_ms, wall_clock_ms());
    auto report = bench::make_report(result, job.chips, readings);
    report.correctness_passed = passed;
    document = bench::to_json(report);
  } else if (kiln_verdict.is_null()) {
    return;
  }
  if (!kiln_verdict.is_null()) document["kiln_verdict"] = std::move(kiln_verdict);
  ended.result = document.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (ended.result.size() > protocol::kResultDocument.max_len) {
    ended.outcome = protocol::JobOutcome::failed;
    ended.exit_code = exit.exit_code;
    ended.detail = "the job's report with kiln's verdict is over the protocol's result limit; ask for fewer repeats "
                   "or list fewer outputs";
    ended.result.clear();
  }
}

void Shell::report_start_failure(std::uint64_t job_id, const std::string& why,
                                 protocol::JobOutcome outcome) {
  JobEnded ended;
  ended.job_id = job_id;
  ended.outcome = outcome;
  ended.exit_code = -1;
  ended.detail = why.substr(0, protocol::kMessageText.max_len);
  core_.on_job_ended(ended, monotonic_clock_ms());
}

void Shell::start_job(const protocol::JobStart& start) {
  if (start.artifacts.empty()) return launch_job(start, start.args);
  ProcessSpec spec;
  spec.program = self_;
  spec.args = {"--config", config_.config_path, "fetch-artifacts"};
  for (const protocol::ArtifactRef& artifact : start.artifacts) {
    spec.args.push_back(fmt::format("{}={}:{}", artifact.name, artifact.sha256, artifact.size_bytes));
  }
  spec.work_dir = (fs::path(config_.work_dir) / "fetch").string();
  spec.timeout_ms = config_.artifacts.fetch_timeout_ms + 5 * kSecondMs;
  spec.output_limit_bytes = protocol::kOutputTail.max_len;
  spec.kill_grace_ms = config_.knobs.kill_grace_ms;
  auto id = runner_.start(spec);
  if (!id) return report_start_failure(start.job_id, "cannot fetch the job's artifacts: " + id.error().message);
  fetching_[*id] = start;
  fetch_by_job_[start.job_id] = *id;
  for (const protocol::ArtifactRef& artifact : start.artifacts) {
    artifacts_in_use_[start.job_id].insert(artifact.sha256);
  }
  logger_->info("job {}: fetching {} artifacts", start.job_id, start.artifacts.size());
}

void Shell::artifacts_fetched(const protocol::JobStart& start, const ProcessExit& exit) {
  const auto give_up = [&](const std::string& why, protocol::JobOutcome outcome) {
    artifacts_in_use_.erase(start.job_id);
    logger_->warn("job {}: {}", start.job_id, why);
    report_start_failure(start.job_id, why, outcome);
  };
  if (exit.outcome == ProcessOutcome::cancelled) {
    return give_up("cancelled while its artifacts were being fetched", protocol::JobOutcome::cancelled);
  }
  if (!exit.succeeded()) {
    std::string last = text::utf8_tail(exit.output_tail, protocol::kMessageText.max_len);
    while (!last.empty() && last.back() == '\n') last.pop_back();
    if (const auto line = last.rfind('\n'); line != std::string::npos) last.erase(0, line + 1);
    return give_up(fmt::format("could not fetch the job's artifacts on node {}: {}", config_.node_id,
                               last.empty() ? exit.detail : last),
                   protocol::JobOutcome::failed_to_start);
  }
  // One line per artifact: from the cache, fetched from where, or found damaged.
  std::istringstream lines(exit.output_tail);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) logger_->info("job {}: artifact {}", start.job_id, line);
  }
  const fs::path dir = fs::path(config_.work_dir) / fmt::format("job-{}-{}", start.job_id, start.attempt);
  const fs::path linked = dir / "artifacts";
  std::error_code ec;
  fs::remove_all(linked, ec);
  fs::create_directories(linked, ec);
  for (const protocol::ArtifactRef& artifact : start.artifacts) {
    if (!ec) fs::create_symlink(artifacts::cache_path(config_.artifacts.cache_dir, artifact.sha256),
                                linked / artifact.name, ec);
  }
  if (ec) {
    return give_up(fmt::format("cannot link the job's artifacts into {}: {}; check the work_dir", linked.string(),
                               ec.message()),
                   protocol::JobOutcome::failed_to_start);
  }
  auto args = protocol::substitute_artifacts(start.args, start.artifacts, linked.string());
  if (!args) return give_up(args.error().message, protocol::JobOutcome::failed_to_start);
  evict_artifacts();
  launch_job(start, std::move(*args));
}

void Shell::evict_artifacts() {
  std::set<std::string> in_use;
  for (const auto& [job_id, digests] : artifacts_in_use_) in_use.insert(digests.begin(), digests.end());
  const auto evicted = artifacts::evict_artifacts(config_.artifacts, in_use);
  if (!evicted.empty()) {
    logger_->info("artifact cache: removed {} least recently used artifacts to stay within {}", evicted.size(),
                  mebibytes(config_.artifacts.cache_limit_bytes));
  }
}

void Shell::launch_job(const protocol::JobStart& start, std::vector<std::string> args) {
  const auto fail_start = [&](const std::string& why) {
    artifacts_in_use_.erase(start.job_id);
    report_start_failure(start.job_id, why);
  };
  std::string program;
  if (start.workload == protocol::kDiagWorkload || start.workload == protocol::kInstallWorkload) {
    program = self_;
    std::vector<std::string> own{"--config", config_.config_path,
                                 start.workload == protocol::kDiagWorkload ? "diag" : "install", "--job"};
    if (start.workload == protocol::kDiagWorkload) own.push_back("--standalone");
    args.insert(args.begin(), own.begin(), own.end());
  } else if (auto it = config_.workloads.find(start.workload); it != config_.workloads.end()) {
    program = it->second;
  } else {
    fail_start(fmt::format("node {} has no workload '{}' in its [workloads]; add it to {} or submit a workload it "
                           "has",
                           config_.node_id, start.workload, config_.config_path));
    return;
  }
  const fs::path dir = fs::path(config_.work_dir) / fmt::format("job-{}-{}", start.job_id, start.attempt);
  RunningJob job{.job_id = start.job_id,
                 .result_file = (dir / "result.json").string(),
                 .chips = start.chip_indices,
                 .benchmark = std::nullopt,
                 .started_at_ms = wall_clock_ms(),
                 .attempt = start.attempt,
                 .workload = start.workload,
                 .dir_name = dir.filename().string()};
  ProcessSpec spec;
  spec.program = program;
  spec.args = args;
  spec.work_dir = dir.string();
  spec.timeout_ms = start.timeout_ms;
  spec.output_limit_bytes = config_.knobs.job_output_limit_bytes;
  spec.kill_grace_ms = config_.knobs.kill_grace_ms;
  spec.cgroup_name = fmt::format("job-{}-{}", start.job_id, start.attempt);
  spec.env_extra = {
      {"KILN_JOB_ID", std::to_string(start.job_id)},
      {"KILN_ATTEMPT", std::to_string(start.attempt)},
      {"KILN_NODE_ID", config_.node_id},
      {"KILN_CHIPS", fmt::format("{}", fmt::join(start.chip_indices, ","))},
      {"KILN_SEED", std::to_string(start.seed)},
      {"KILN_DRIVER_LIBRARY", config_.driver_library_path},
      {"KILN_DRIVER_OPTIONS", config_.driver_options},
      {"KILN_RESULT_FILE", job.result_file},
      {"KILN_WORK_DIR", dir.string()},
  };
  if (start.rendezvous.world_size > 0) {
    // torch.distributed's names, as torchrun sets them: one process per node, so the local
    // rank is 0 of 1 and the node's rank is the job's.
    const protocol::Rendezvous& r = start.rendezvous;
    spec.env_extra["RANK"] = std::to_string(r.rank);
    spec.env_extra["WORLD_SIZE"] = std::to_string(r.world_size);
    spec.env_extra["MASTER_ADDR"] = r.master_address;
    spec.env_extra["MASTER_PORT"] = std::to_string(r.master_port);
    spec.env_extra["LOCAL_RANK"] = "0";
    spec.env_extra["LOCAL_WORLD_SIZE"] = "1";
    spec.env_extra["GROUP_RANK"] = std::to_string(r.rank);
  }
  if (start.benchmark.repeats > 0) {
    job.benchmark = bench_settings(start.benchmark);
    if (auto valid = bench::validate(*job.benchmark); !valid) {
      fail_start("invalid benchmark settings: " + valid.error().message);
      return;
    }
    for (auto& [key, value] : bench::env_for(*job.benchmark)) spec.env_extra[key] = value;
  }
  auto id = runner_.start(spec);
  if (!id) {
    fail_start(id.error().message);
    return;
  }
  process_by_job_[start.job_id] = *id;
  jobs_by_process_[*id] = job;
  if (start.workload == protocol::kInstallWorkload) install_state_ = "installing";
  update_telemetry_watch();
}

}  // namespace kiln::agent::detail
