#include "agent/shell/agent_shell.h"

#include <poll.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <zmq.hpp>

#include "agent/artifacts/artifact_cache.h"
#include "agent/bench/bench.h"
#include "agent/core/agent_core.h"
#include "agent/health/diagnostics.h"
#include "agent/host/containment.h"
#include "agent/host/job_dirs.h"
#include "agent/host/topology.h"
#include "agent/metrics/agent_metrics.h"
#include "agent/shell/agent_status.h"
#include "agent/shell/local_socket.h"
#include "agent/shell/telemetry_sampler.h"
#include "common/clock.h"
#include "common/http/loop_question.h"
#include "common/http/server.h"
#include "common/logging.h"
#include "common/metrics/exposition.h"
#include "common/metrics/process_metrics.h"
#include "common/process/cgroup.h"
#include "common/process/process_runner.h"
#include "common/protocol/artifacts.h"
#include "common/protocol/json.h"
#include "common/protocol/repair.h"
#include "common/text/utf8.h"
#include "common/transport/zmq_transport.h"

namespace kiln::agent {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxPollWaitMs = 200;
constexpr DurationMs kTelemetryIntervalMs = 100;
constexpr DurationMs kLocalDiagTimeoutMs = 2 * kHourMs;
// How long start-up waits for what a previous incarnation left to die after SIGKILL.
constexpr DurationMs kLeftoverKillWaitMs = 5 * kSecondMs;
// /metrics: every chip is read this often; a reading three times older is not shown (the chip
// stopped answering). A scrape waits this long for the loop's answer.
constexpr DurationMs kMetricsSampleIntervalMs = kSecondMs;
constexpr DurationMs kMetricsMaxSampleAgeMs = 3 * kMetricsSampleIntervalMs;
constexpr auto kMetricsAnswerTimeout = std::chrono::seconds(5);

// The live process groups of jobs and of the agent's own work, for the next incarnation.
std::string group_record_path(const AgentConfig& config) {
  return (fs::path(config.work_dir) / "process-groups").string();
}

std::string self_executable() {
  std::error_code ec;
  auto path = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("kiln-agent") : path.string();
}

bench::BenchmarkSettings bench_settings(const protocol::BenchmarkSpec& spec) {
  bench::BenchmarkSettings s;
  s.warmup_min = spec.warmup_min;
  s.warmup_max = spec.warmup_max;
  s.steady_window = spec.steady_window;
  s.steady_tolerance = spec.steady_tolerance_ppm / 1e6;
  s.repeats = spec.repeats;
  return s;
}

JobDirLimits job_dir_limits(const AgentKnobs& knobs) {
  return {knobs.job_dir_max_age_ms, knobs.job_dirs_max_bytes};
}

std::string mebibytes(std::uint64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

// Applies the job directory retention and logs what it did; `running` names the running jobs'
// directories, which stay whatever their size.
void clean_job_dirs_logged(const AgentConfig& config, const std::set<std::string>& running, spdlog::logger& logger) {
  const JobDirCleanup cleanup =
      clean_job_dirs(config.work_dir, running, job_dir_limits(config.knobs), wall_clock_ms());
  if (!cleanup.removed.empty()) {
    logger.info("job directories: removed {} finished ones ({}, oldest first: {}); {} kept", cleanup.removed.size(),
                mebibytes(cleanup.removed_bytes), fmt::join(cleanup.removed, " "), mebibytes(cleanup.kept_bytes));
  }
  if (cleanup.running_bytes > config.knobs.job_dirs_max_bytes) {
    logger.warn("job directories: running jobs alone take {}, over job_dirs_max_bytes ({}); they are kept until "
                "their jobs end",
                mebibytes(cleanup.running_bytes), mebibytes(config.knobs.job_dirs_max_bytes));
  }
  for (const std::string& problem : cleanup.problems) logger.warn("job directories: cannot clean {}", problem);
}

std::set<std::uint32_t> unhealthy_chips_of(const AgentIdentity& identity) {
  std::set<std::uint32_t> chips;
  for (const protocol::ChipInfo& chip : identity.chips) {
    if (!chip.healthy) chips.insert(chip.index);
  }
  return chips;
}

// Removes the agent's own cgroup directory once the runner (destroyed first) has removed
// its children's: a clean stop leaves nothing under kiln-jobs.
struct OwnedCgroupDir {
  std::string dir;
  ~OwnedCgroupDir() {
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
};

class Shell final : public AgentShell {
 public:
  Shell(AgentConfig config, KeyPair keys, std::string coordinator_key, AgentIdentity identity,
        std::shared_ptr<spdlog::logger> logger, const ContainmentChoice& containment)
      : config_(std::move(config)),
        keys_(std::move(keys)),
        coordinator_key_(std::move(coordinator_key)),
        logger_(std::move(logger)),
        unanswered_chips_(unhealthy_chips_of(identity)),
        hardware_revision_(identity.hardware_revision),
        chips_(identity.chips),
        cgroup_dir_{containment.cgroup_dir},
        core_(std::move(identity), SessionKnobs{config_.knobs.heartbeat_interval_ms, config_.knobs.liveness_missed_beats,
                                                config_.knobs.reconnect_backoff_initial_ms,
                                                config_.knobs.reconnect_backoff_max_ms,
                                                config_.knobs.max_concurrent_jobs, config_.knobs.probe_interval_ms}),
        runner_(group_record_path(config_), containment.cgroup_dir),
        self_(self_executable()),
        telemetry_(config_.driver_library_path, config_.driver_options, kTelemetryIntervalMs) {
    auto local = LocalSocketServer::listen(config_.local_socket_path, config_.local_socket_group);
    if (local) {
      local_ = std::move(*local);
    } else {
      logger_->error("no local socket, so `kiln-agent diag` on this host runs standalone: {}", local.error().message);
    }
  }

  // /metrics, when [http] listen is set. What the agent knows of its chips and its session is
  // this loop's state: the HTTP thread asks the loop (LoopQuestion), which renders between two
  // events. The chips' readings come from the telemetry thread, which reads every chip that
  // answered at start-up each second with its own driver handle, so a wedged chip never stalls
  // the loop or a scrape; its readings then age out of the page.
  Status serve_metrics() {
    if (config_.http_listen.empty()) return {};
    std::set<std::uint32_t> readable;
    for (const protocol::ChipInfo& chip : chips_) {
      if (unanswered_chips_.count(chip.index) == 0) readable.insert(chip.index);
    }
    telemetry_.follow(readable, kMetricsSampleIntervalMs);
    auto server = http::serve_loop_page(config_.http_listen, "/metrics", question_, std::string(metrics::kContentType),
                                        metrics::process_metrics_text, "the agent's loop", kMetricsAnswerTimeout,
                                        config_.config_path);
    if (!server) return tl::unexpected(server.error());
    http_ = std::move(*server);
    logger_->info("serving /metrics on http://{}/metrics", http_->address());
    return {};
  }

  Status run(const std::atomic<bool>& stop) override {
    if (stop.load()) return {};  // asked to stop while it was still starting
    core_.on_start(monotonic_clock_ms());
    carry_out_actions();
    while (!stop.load()) {
      const TimeMs now = monotonic_clock_ms();
      int wait_ms = kMaxPollWaitMs;
      if (auto deadline = core_.next_deadline()) {
        wait_ms = static_cast<int>(std::clamp<TimeMs>(*deadline - now, 0, kMaxPollWaitMs));
      }
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, runner_.wakeup_fd(), ZMQ_POLLIN, 0});
      const std::size_t local_first = items.size();
      if (local_) {
        for (int fd : local_->fds()) items.push_back({nullptr, fd, ZMQ_POLLIN, 0});
      }
      const std::size_t question_index = items.size();
      items.push_back({nullptr, question_.wake_fd(), ZMQ_POLLIN, 0});
      const std::size_t socket_index = items.size();
      if (socket_) {
        items.push_back({socket_->handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({monitor_->socket().handle(), 0, ZMQ_POLLIN, 0});
      }
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(wait_ms));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return fail(Errc::io, fmt::format("poll failed: {}", e.what()));
      }
      if (items[0].revents & ZMQ_POLLIN) collect_finished();
      bool local_ready = false;
      for (std::size_t i = local_first; i < question_index; ++i) local_ready = local_ready || items[i].revents != 0;
      if (local_ready) serve_local_requests();
      if (socket_) {
        if (auto auth = monitor_->poll(); !auth && !auth_error_logged_) {
          logger_->error("{}", auth.error().message);
          auth_error_logged_ = true;
        }
        if (monitor_->take_connection_lost()) core_.on_connection_lost();
        if (items[socket_index].revents & ZMQ_POLLIN) receive_all();
      }
      core_.on_tick(monotonic_clock_ms());
      carry_out_actions();
      clean_job_dirs_if_due();
      if (items[question_index].revents & ZMQ_POLLIN) question_.answer_pending([this] { return metrics_text(); });
    }
    logger_->info("stopping: cancelling {} running jobs", runner_.running());
    return {};
  }

 private:
  struct RunningJob {
    std::uint64_t job_id = 0;
    std::string result_file;
    std::vector<std::uint32_t> chips;
    std::optional<bench::BenchmarkSettings> benchmark;
    TimeMs started_at_ms = 0;  // wall clock
    std::uint32_t attempt = 0;
    std::string workload;
    std::string dir_name;  // in work_dir
  };

  // Work the agent runs for itself rather than for a job.
  enum class OwnWork { probe, local_diag };
  struct OwnProcess {
    OwnWork kind = OwnWork::probe;
    int connection = -1;       // local_diag: who asked
    std::string chip_owner;    // local_diag: its name in the chip table
  };

  void serve_local_requests() {
    for (const LocalRequest& request : local_->poll()) {
      if (request.command == "status") {
        local_->reply(request.connection, 0, status_to_json(status()));
        continue;
      }
      const std::string owner = fmt::format("local-diag-{}", ++local_requests_);
      const std::string description =
          fmt::format("level {} diagnostics asked on this host's local socket", request.level);
      if (auto claimed = core_.claim_chips(owner, description, core_.chip_indices()); !claimed) {
        local_->reply(request.connection, 2,
                      fmt::format("node {} cannot run level {} diagnostics now: {}; wait for them to end, or "
                                  "drain the node (kiln drain {}) and ask the coordinator: kiln diag {} "
                                  "--level {}\n",
                                  config_.node_id, request.level, claimed.error().message, config_.node_id,
                                  config_.node_id, request.level));
        continue;
      }
      ProcessSpec spec;
      spec.program = self_;
      spec.args = {"--config", config_.config_path, "diag", "--standalone", "--no-progress", "--level",
                   std::to_string(request.level)};
      spec.work_dir = (fs::path(config_.work_dir) / "local-diag").string();
      spec.timeout_ms = kLocalDiagTimeoutMs;
      spec.output_limit_bytes = protocol::kOutputTail.max_len;
      spec.kill_grace_ms = config_.knobs.kill_grace_ms;
      auto id = runner_.start(spec);
      if (!id) {
        core_.release_chips(owner);
        local_->reply(request.connection, 2, id.error().message + "\n");
        continue;
      }
      own_processes_[*id] = OwnProcess{OwnWork::local_diag, request.connection, owner};
      logger_->info("running level {} diagnostics for a local request", request.level);
    }
  }

  AgentStatus status() const {
    AgentStatus out;
    out.node_id = config_.node_id;
    out.coordinator_endpoint = endpoints_[endpoint_index_];
    out.session = std::string(enum_name(core_.session_state()));
    if (last_heard_steady_ms_) out.coordinator_last_heard_ms_ago = monotonic_clock_ms() - *last_heard_steady_ms_;
    bool probe_running = false;
    for (const auto& [id, own] : own_processes_) {
      probe_running = probe_running || own.kind == OwnWork::probe;
      out.local_diagnostics = out.local_diagnostics || own.kind == OwnWork::local_diag;
    }
    for (std::uint32_t index : core_.chip_indices()) {
      StatusChip chip{index, unanswered_chips_.count(index) == 0, probe_running ? "probe" : "idle", ""};
      if (out.local_diagnostics) chip = {index, chip.healthy, "diagnostics", "diagnostics asked on this host"};
      out.chips.push_back(chip);
    }
    const TimeMs now = wall_clock_ms();
    for (const auto& [id, job] : jobs_by_process_) {
      const StatusJob entry{job.job_id, job.attempt, job.workload, job.chips, now - job.started_at_ms};
      const bool install = job.workload == protocol::kInstallWorkload;
      (install ? out.installs : out.jobs).push_back(entry);
      const char* owner = install ? "install" : job.workload == protocol::kDiagWorkload ? "diagnostics" : "job";
      for (std::uint32_t index : job.chips) {
        if (index >= out.chips.size()) continue;
        out.chips[index].owner = owner;
        out.chips[index].held_by = fmt::format("job {} attempt {} ({})", job.job_id, job.attempt, job.workload);
      }
    }
    out.probe.running = probe_running;
    if (probe_started_wall_ms_ > 0) out.probe.last_started_ms_ago = now - probe_started_wall_ms_;
    out.probe.last_verdict = last_probe_verdict_;
    return out;
  }

  std::string metrics_text() const {
    AgentMetricsInput in;
    in.node_id = config_.node_id;
    in.hardware_revision = hardware_revision_;
    in.chips = chips_;
    in.samples = telemetry_.latest();
    in.now_wall_ms = wall_clock_ms();
    in.max_sample_age_ms = kMetricsMaxSampleAgeMs;
    in.probe_checks = last_probe_checks_;
    in.probe_at_wall_ms = last_probe_at_wall_ms_;
    in.install_state = install_state_;
    in.coordinator_connected = core_.session_state() == AgentCore::SessionState::registered;
    return render_agent_metrics(in);
  }

  void clean_job_dirs_if_due() {
    const TimeMs now = monotonic_clock_ms();
    if (now < next_job_dir_cleanup_ms_) return;
    next_job_dir_cleanup_ms_ = now + config_.knobs.job_dir_cleanup_interval_ms;
    std::set<std::string> running;
    for (const auto& [id, job] : jobs_by_process_) running.insert(job.dir_name);
    clean_job_dirs_logged(config_, running, *logger_);
  }

  void start_probe() {
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

  static protocol::HealthReport probe_failure(const std::string& reason, const std::string& message) {
    protocol::HealthReport report;
    report.verdict = protocol::HealthStatus::fail;
    report.checks.push_back(protocol::HealthCheck{"probe", -1, protocol::HealthStatus::fail, reason, "software",
                                                  message.substr(0, protocol::kMessageText.max_len),
                                                  "run kiln-agent probe on the host to see why"});
    return report;
  }

  void own_process_ended(const OwnProcess& own, const ProcessExit& exit) {
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

  void receive_all() {
    while (socket_) {
      auto received = transport::receive(*socket_, false);
      if (!received) {
        if (received.error().code != Errc::unavailable) logger_->warn("dropped a message: {}", received.error().message);
        if (received.error().code == Errc::unavailable) break;
        continue;
      }
      auto envelope = protocol::decode(received->header, received->body, limits_);
      if (!envelope) {
        logger_->warn("refused a message from the coordinator: {}", envelope.error().message);
        std::uint64_t corr = 0;
        if (auto header = protocol::decode_header(received->header, limits_)) corr = header->id;
        core_.refuse_message(
            protocol::ErrorReply{std::string(to_string(envelope.error().code)), envelope.error().message, {}}, corr);
        carry_out_actions();
        continue;
      }
      last_heard_steady_ms_ = monotonic_clock_ms();
      core_.on_message(*envelope, monotonic_clock_ms());
      carry_out_actions();
    }
  }

  void collect_finished() {
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

  JobEnded ended_from(const RunningJob& job, const ProcessExit& exit) {
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
    if (job.benchmark && ended.outcome == protocol::JobOutcome::succeeded) {
      auto result = bench::parse_workload_result(ended.result, *job.benchmark);
      if (!result) {
        ended.outcome = protocol::JobOutcome::failed;
        ended.detail = "the workload's benchmark result breaks the contract of docs/workloads.md: " +
                       result.error().message;
      } else {
        const auto readings = telemetry_.readings(job.chips, job.started_at_ms, wall_clock_ms());
        ended.result = bench::to_json(bench::make_report(*result, job.chips, readings)).dump();
        if (ended.result.size() > protocol::kResultDocument.max_len) {
          ended.outcome = protocol::JobOutcome::failed;
          ended.detail = "the benchmark report is over the protocol's result limit; ask for fewer repeats";
          ended.result.clear();
        }
      }
    }
    ended.detail = ended.detail.substr(0, protocol::kMessageText.max_len);
    return ended;
  }

  void report_start_failure(std::uint64_t job_id, const std::string& why,
                  protocol::JobOutcome outcome = protocol::JobOutcome::failed_to_start) {
    JobEnded ended;
    ended.job_id = job_id;
    ended.outcome = outcome;
    ended.exit_code = -1;
    ended.detail = why.substr(0, protocol::kMessageText.max_len);
    core_.on_job_ended(ended, monotonic_clock_ms());
  }

  // A job that names artifacts starts once `kiln-agent fetch-artifacts` has them in the cache,
  // verified: a process of its own, so a long download never stalls the heartbeats.
  void start_job(const protocol::JobStart& start) {
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

  void artifacts_fetched(const protocol::JobStart& start, const ProcessExit& exit) {
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

  // The cache back under its limit, keeping what running and starting jobs use.
  void evict_artifacts() {
    std::set<std::string> in_use;
    for (const auto& [job_id, digests] : artifacts_in_use_) in_use.insert(digests.begin(), digests.end());
    const auto evicted = artifacts::evict_artifacts(config_.artifacts, in_use);
    if (!evicted.empty()) {
      logger_->info("artifact cache: removed {} least recently used artifacts to stay within {}", evicted.size(),
                    mebibytes(config_.artifacts.cache_limit_bytes));
    }
  }

  void launch_job(const protocol::JobStart& start, std::vector<std::string> args) {
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

  void update_telemetry_watch() {
    std::set<std::uint32_t> chips;
    for (const auto& [id, job] : jobs_by_process_) {
      if (job.benchmark) chips.insert(job.chips.begin(), job.chips.end());
    }
    telemetry_.watch(chips);
  }

  void connect() {
    if (socket_) {
      monitor_.reset();
      socket_.reset();
    }
    socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
    transport::configure_curve_client(*socket_, keys_, coordinator_key_, limits_.max_message_bytes);
    monitor_ = std::make_unique<transport::HandshakeMonitor>(context_, *socket_,
                                                             fmt::format("agent-{}", ++connection_count_));
    auth_error_logged_ = false;
    // Each new session after the first tries the next coordinator listed: the one before went
    // silent or is a standby, and one of the others may lead the store now.
    if (connection_count_ > 1) endpoint_index_ = (endpoint_index_ + 1) % endpoints_.size();
    const std::string& endpoint = endpoints_[endpoint_index_];
    try {
      socket_->connect(endpoint);
    } catch (const zmq::error_t& e) {
      logger_->error("cannot connect to {}: {}; check [coordinator] endpoint in {}", endpoint, e.what(),
                     config_.config_path);
    }
    logger_->info("connecting to the coordinator at {}", endpoint);
  }

  void send(protocol::Body body, std::uint64_t id, std::uint64_t corr) {
    if (!socket_) return;
    // Strings from workloads and files reach messages in many places; the coordinator refuses
    // any that is not UTF-8, so each is repaired here, once, whatever put it there.
    protocol::repair_utf8(body);
    auto envelope = protocol::make_envelope(std::move(body), id, corr);
    if (auto s = transport::send_envelope(*socket_, nullptr, envelope, limits_); !s) {
      logger_->warn("could not send {}: {}", envelope.header.type, s.error().message);
    }
  }

  void carry_out_actions() {
    while (auto a = core_.poll_action()) {
      std::visit(
          [&](auto& act) {
            using T = std::decay_t<decltype(act)>;
            if constexpr (std::is_same_v<T, action::Connect>) {
              connect();
            } else if constexpr (std::is_same_v<T, action::Send>) {
              send(std::move(act.body), act.id, act.corr);
            } else if constexpr (std::is_same_v<T, action::StartJob>) {
              start_job(act.job);
            } else if constexpr (std::is_same_v<T, action::CancelJob>) {
              if (auto it = fetch_by_job_.find(act.job_id); it != fetch_by_job_.end()) {
                (void)runner_.cancel(it->second);
              }
              if (auto it = process_by_job_.find(act.job_id); it != process_by_job_.end()) {
                logger_->info("job {}: cancelling: {}", act.job_id, act.reason);
                (void)runner_.cancel(it->second);
              }
            } else if constexpr (std::is_same_v<T, action::RunProbe>) {
              start_probe();
            } else if constexpr (std::is_same_v<T, action::NotifyPreemption>) {
              if (auto it = process_by_job_.find(act.job_id); it != process_by_job_.end()) {
                (void)runner_.signal(it->second, SIGUSR1);
              }
            } else if constexpr (std::is_same_v<T, action::Log>) {
              logger_->log(spdlog_level(act.severity), "{}", act.text);
            }
          },
          *a);
    }
  }

  AgentConfig config_;
  KeyPair keys_;
  std::string coordinator_key_;
  std::shared_ptr<spdlog::logger> logger_;
  std::set<std::uint32_t> unanswered_chips_;  // reported unhealthy at start-up; never probed
  std::string hardware_revision_;             // as registered
  std::vector<protocol::ChipInfo> chips_;     // as registered: index and serial
  OwnedCgroupDir cgroup_dir_;                 // declared before runner_, so it goes after it
  AgentCore core_;
  ProcessRunner runner_;
  protocol::CodecLimits limits_;
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<transport::HandshakeMonitor> monitor_;
  bool auth_error_logged_ = false;
  int connection_count_ = 0;
  std::vector<std::string> endpoints_ = coordinator_endpoints(config_);
  std::size_t endpoint_index_ = 0;
  std::map<std::uint64_t, ProcessId> process_by_job_;
  std::map<ProcessId, RunningJob> jobs_by_process_;
  std::map<ProcessId, OwnProcess> own_processes_;
  std::map<ProcessId, protocol::JobStart> fetching_;  // fetch-artifacts runs, by the job they are for
  std::map<std::uint64_t, ProcessId> fetch_by_job_;
  std::map<std::uint64_t, std::set<std::string>> artifacts_in_use_;  // job id -> digests, never evicted
  std::uint64_t local_requests_ = 0;
  TimeMs probe_started_wall_ms_ = 0;  // of the probe running now, or of the last one
  std::string last_probe_verdict_;     // of the last probe that ended
  std::vector<protocol::HealthCheck> last_probe_checks_;  // of the last probe that ended
  TimeMs last_probe_at_wall_ms_ = 0;                      // when it began
  std::string install_state_ = "none";                    // kInstallStates
  std::optional<TimeMs> last_heard_steady_ms_;  // the coordinator's last message
  // Start-up cleaned the job directories; the next pass is an interval later.
  TimeMs next_job_dir_cleanup_ms_ = monotonic_clock_ms() + config_.knobs.job_dir_cleanup_interval_ms;
  std::string self_;
  TelemetrySampler telemetry_;
  std::unique_ptr<LocalSocketServer> local_;
  http::LoopQuestion question_;
  // Last: stopped first, so no scrape waits on a loop that is gone.
  std::unique_ptr<http::Server> http_;
};

}  // namespace

Result<DiscoveredIdentity> discover_identity(const AgentConfig& config) {
  auto options = health::default_diag_options(config);
  if (!options) return tl::unexpected(options.error());
  auto node = health::read_node_identity(config, *options);
  if (!node) return tl::unexpected(node.error());
  DiscoveredIdentity found;
  AgentIdentity& identity = found.identity;
  identity.node_id = config.node_id;
  identity.agent_version = KILN_VERSION;
  identity.driver_version = node->driver.version;
  for (const auto& [name, program] : config.workloads) identity.workloads.push_back(name);
  identity.rendezvous_address = announced_rendezvous_address(config);
  identity.labels = config.labels;
  // What the driver declares it drives travels as the label backend=KIND: kiln counts a node's
  // results as silicon's by it alone (docs/driver-abi.md). The config may not set it.
  if (!node->driver.backend.empty()) identity.labels.push_back("backend=" + node->driver.backend);
  for (std::uint32_t i = 0; i < node->chips.size(); ++i) {
    const Result<health::CheckReading>& chip = node->chips[i];
    if (!chip || !chip->identity || !chip->firmware) {
      // Reported so the coordinator places nothing on it; the node's other chips serve.
      identity.chips.push_back(protocol::ChipInfo{i, std::string(kUnknownSerial), "", 0, false});
      found.unhealthy_chips[i] = chip ? "the driver gave no identity or firmware" : chip.error().message;
      continue;
    }
    if (identity.hardware_revision.empty()) identity.hardware_revision = chip->identity->hardware_revision;
    identity.chips.push_back(protocol::ChipInfo{i, chip->identity->serial, chip->firmware->active_version(),
                                                static_cast<std::uint32_t>(std::max(0, chip->identity->numa_node)),
                                                true});
  }
  if (config.hardware_revision_override) identity.hardware_revision = *config.hardware_revision_override;
  if (identity.hardware_revision.empty()) {
    return fail(Errc::config, fmt::format("no chip gave its hardware revision ({} chips, {} unreadable); set "
                                          "hardware_revision in {} or fix the driver options",
                                          identity.chips.size(), found.unhealthy_chips.size(), config.config_path));
  }
  auto topology = discover_topology();
  if (topology) {
    identity.host.hostname = topology->hostname;
    identity.host.numa_nodes = static_cast<std::uint32_t>(std::max(1, topology->numa_nodes));
    identity.host.cores = static_cast<std::uint32_t>(std::max(1, topology->cores));
    identity.host.pci_devices = static_cast<std::uint32_t>(topology->pci_devices.size());
  }
  return found;
}

Result<std::unique_ptr<AgentShell>> AgentShell::create(AgentConfig config) {
  auto logger = make_logger("agent:" + config.node_id, config.log_level);
  if (!logger) return tl::unexpected(logger.error());
  auto keys = load_secret_key_file(config.agent_secret_key_file);
  if (!keys) return tl::unexpected(keys.error());
  auto coordinator_key = load_public_key_file(config.coordinator_public_key_file);
  if (!coordinator_key) return tl::unexpected(coordinator_key.error());
  std::error_code ec;
  fs::create_directories(config.work_dir, ec);
  if (ec) {
    return fail(Errc::io, fmt::format("cannot create work_dir {}: {}; fix work_dir in {}", config.work_dir,
                                      ec.message(), config.config_path));
  }
  // Before anything touches the chips or the coordinator hears of us: an old attempt must
  // never run beside the new one.
  auto containment = choose_containment(config);
  if (!containment) return tl::unexpected(containment.error());
  if (containment->cgroup) {
    (*logger)->info("{}", describe_containment(*containment));
  } else {
    (*logger)->warn("{}", describe_containment(*containment));
  }
  if (containment->cgroup) {
    auto cgroups = kill_leftover_cgroups(containment->cgroup_dir, kLeftoverKillWaitMs);
    if (!cgroups) return tl::unexpected(cgroups.error());
    for (const LeftoverCgroup& cgroup : *cgroups) {
      if (cgroup.processes_killed > 0) {
        (*logger)->warn("killed {} processes of cgroup {} left by a previous run of the agent",
                        cgroup.processes_killed, cgroup.name);
      }
    }
  }
  auto leftovers = kill_recorded_groups(group_record_path(config), kLeftoverKillWaitMs);
  if (!leftovers) return tl::unexpected(leftovers.error());
  for (const LeftoverGroup& group : *leftovers) {
    if (group.processes_killed > 0) {
      (*logger)->warn("killed {} processes of process group {} ({}) left by a previous run of the agent",
                      group.processes_killed, group.process_group, group.program);
    }
  }
  clean_job_dirs_logged(config, {}, **logger);
  auto found = discover_identity(config);
  if (!found) return tl::unexpected(found.error());
  const AgentIdentity& identity = found->identity;
  for (const auto& [chip, why] : found->unhealthy_chips) {
    (*logger)->error("chip {} is reported unhealthy, so it takes no work until the agent restarts: {}", chip, why);
  }
  (*logger)->info("node {} (revision {}, {} chips of which {} unhealthy, driver {})", identity.node_id,
                  identity.hardware_revision, identity.chips.size(), found->unhealthy_chips.size(),
                  identity.driver_version);
  auto shell = std::make_unique<Shell>(std::move(config), std::move(*keys), std::move(*coordinator_key),
                                       std::move(found->identity), *logger, *containment);
  if (auto serving = shell->serve_metrics(); !serving) return tl::unexpected(serving.error());
  return std::unique_ptr<AgentShell>(std::move(shell));
}

}  // namespace kiln::agent
