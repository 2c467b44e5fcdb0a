#include "agent/shell/agent_shell.h"
#include "agent/shell/agent_shell_loop.h"

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

std::string detail::mebibytes(std::uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

namespace {

using detail::mebibytes;
using detail::Shell;

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

JobDirLimits job_dir_limits(const AgentKnobs& knobs) {
  return {knobs.job_dir_max_age_ms, knobs.job_dirs_max_bytes};
}

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

}  // namespace

namespace detail {

Shell::Shell(AgentConfig config, KeyPair keys, std::string coordinator_key, AgentIdentity identity,
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

Status Shell::serve_metrics() {
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

Status Shell::run(const std::atomic<bool>& stop) {
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

void Shell::serve_local_requests() {
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

AgentStatus Shell::status() const {
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

std::string Shell::metrics_text() const {
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

void Shell::clean_job_dirs_if_due() {
  const TimeMs now = monotonic_clock_ms();
  if (now < next_job_dir_cleanup_ms_) return;
  next_job_dir_cleanup_ms_ = now + config_.knobs.job_dir_cleanup_interval_ms;
  std::set<std::string> running;
  for (const auto& [id, job] : jobs_by_process_) running.insert(job.dir_name);
  clean_job_dirs_logged(config_, running, *logger_);
}

void Shell::receive_all() {
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

void Shell::update_telemetry_watch() {
  std::set<std::uint32_t> chips;
  for (const auto& [id, job] : jobs_by_process_) {
    if (job.benchmark) chips.insert(job.chips.begin(), job.chips.end());
  }
  telemetry_.watch(chips);
}

void Shell::connect() {
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

void Shell::send(protocol::Body body, std::uint64_t id, std::uint64_t corr) {
  if (!socket_) return;
  // Strings from workloads and files reach messages in many places; the coordinator refuses
  // any that is not UTF-8, so each is repaired here, once, whatever put it there.
  protocol::repair_utf8(body);
  auto envelope = protocol::make_envelope(std::move(body), id, corr);
  if (auto s = transport::send_envelope(*socket_, nullptr, envelope, limits_); !s) {
    logger_->warn("could not send {}: {}", envelope.header.type, s.error().message);
  }
}

void Shell::carry_out_actions() {
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

}  // namespace detail

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
    // A backend that declares no firmware (the CPU's) has chips without any: healthy all the same.
    const bool firmware_less = chip && chip->capabilities && !chip->capabilities->firmware_slots;
    if (!chip || !chip->identity || (!chip->firmware && !firmware_less)) {
      // Reported so the coordinator places nothing on it; the node's other chips serve.
      identity.chips.push_back(protocol::ChipInfo{i, std::string(kUnknownSerial), "", 0, false});
      found.unhealthy_chips[i] = chip ? "the driver gave no identity or firmware" : chip.error().message;
      continue;
    }
    if (identity.hardware_revision.empty()) identity.hardware_revision = chip->identity->hardware_revision;
    identity.chips.push_back(protocol::ChipInfo{i, chip->identity->serial,
                                                chip->firmware ? chip->firmware->active_version() : std::string(),
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
