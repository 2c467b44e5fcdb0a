#include "agent/shell/agent_shell.h"

#include <poll.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <zmq.hpp>

#include "agent/core/agent_core.h"
#include "agent/host/process_runner.h"
#include "agent/host/topology.h"
#include "common/logging.h"
#include "common/transport/zmq_transport.h"
#include "drivers/loader.h"

namespace kiln::agent {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxPollWaitMs = 200;

TimeMs steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The last `limit` bytes, so the protocol's bounds hold whatever a workload printed.
std::string tail(const std::string& text, std::size_t limit) {
  return text.size() <= limit ? text : text.substr(text.size() - limit);
}

class Shell final : public AgentShell {
 public:
  Shell(AgentConfig config, KeyPair keys, std::string coordinator_key, std::unique_ptr<drivers::Driver> driver,
        AgentIdentity identity, std::shared_ptr<spdlog::logger> logger)
      : config_(std::move(config)),
        keys_(std::move(keys)),
        coordinator_key_(std::move(coordinator_key)),
        driver_(std::move(driver)),
        logger_(std::move(logger)),
        core_(std::move(identity), SessionKnobs{config_.knobs.heartbeat_interval_ms, config_.knobs.liveness_missed_beats,
                                                config_.knobs.reconnect_backoff_initial_ms,
                                                config_.knobs.reconnect_backoff_max_ms,
                                                config_.knobs.max_concurrent_jobs}) {}

  Status run(const std::atomic<bool>& stop) override {
    core_.on_start(steady_ms());
    carry_out_actions();
    while (!stop.load()) {
      const TimeMs now = steady_ms();
      int wait_ms = kMaxPollWaitMs;
      if (auto deadline = core_.next_deadline()) {
        wait_ms = static_cast<int>(std::clamp<TimeMs>(*deadline - now, 0, kMaxPollWaitMs));
      }
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, runner_.wakeup_fd(), ZMQ_POLLIN, 0});
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
      if (socket_) {
        if (auto auth = monitor_->poll(); !auth && !auth_error_logged_) {
          logger_->error("{}", auth.error().message);
          auth_error_logged_ = true;
        }
        if (items[1].revents & ZMQ_POLLIN) receive_all();
      }
      core_.on_tick(steady_ms());
      carry_out_actions();
    }
    logger_->info("stopping: cancelling {} running jobs", runner_.running());
    return {};
  }

 private:
  struct RunningJob {
    std::uint64_t job_id = 0;
    std::string result_file;
  };

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
        send(protocol::ErrorReply{std::string(to_string(envelope.error().code)), envelope.error().message, {}}, corr);
        continue;
      }
      core_.on_message(*envelope, steady_ms());
      carry_out_actions();
    }
  }

  void collect_finished() {
    for (const ProcessExit& exit : runner_.poll_finished()) {
      auto it = jobs_by_process_.find(exit.id);
      if (it == jobs_by_process_.end()) continue;
      const RunningJob job = it->second;
      jobs_by_process_.erase(it);
      core_.on_job_ended(ended_from(job, exit), steady_ms());
    }
    carry_out_actions();
  }

  JobEnded ended_from(const RunningJob& job, const ProcessExit& exit) {
    JobEnded ended;
    ended.job_id = job.job_id;
    ended.duration_ms = static_cast<std::uint64_t>(exit.duration_ms);
    ended.exit_code = exit.exit_code;
    ended.output_tail = tail(exit.output_tail, protocol::kOutputTail.max_len);
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
    return ended;
  }

  void start_job(const protocol::JobStart& start) {
    auto fail_start = [&](const std::string& why) {
      JobEnded ended;
      ended.job_id = start.job_id;
      ended.outcome = protocol::JobOutcome::failed_to_start;
      ended.exit_code = -1;
      ended.detail = why;
      core_.on_job_ended(ended, steady_ms());
    };
    auto program = config_.workloads.find(start.workload);
    if (program == config_.workloads.end()) {
      fail_start(fmt::format("node {} has no workload '{}' in its [workloads]; add it to {} or submit a workload it "
                             "has",
                             config_.node_id, start.workload, config_.config_path));
      return;
    }
    const fs::path dir = fs::path(config_.work_dir) / fmt::format("job-{}-{}", start.job_id, start.attempt);
    RunningJob job{start.job_id, (dir / "result.json").string()};
    ProcessSpec spec;
    spec.program = program->second;
    spec.args = start.args;
    spec.work_dir = dir.string();
    spec.timeout_ms = start.timeout_ms;
    spec.output_limit_bytes = config_.knobs.job_output_limit_bytes;
    spec.kill_grace_ms = config_.knobs.kill_grace_ms;
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
    auto id = runner_.start(spec);
    if (!id) {
      fail_start(id.error().message);
      return;
    }
    process_by_job_[start.job_id] = *id;
    jobs_by_process_[*id] = job;
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
    try {
      socket_->connect(config_.coordinator_endpoint);
    } catch (const zmq::error_t& e) {
      logger_->error("cannot connect to {}: {}; check coordinator_endpoint in {}", config_.coordinator_endpoint,
                     e.what(), config_.config_path);
    }
    logger_->info("connecting to the coordinator at {}", config_.coordinator_endpoint);
  }

  void send(protocol::Body body, std::uint64_t corr) {
    if (!socket_) return;
    auto envelope = protocol::make_envelope(std::move(body), next_message_id_++, corr);
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
              send(std::move(act.body), act.corr);
            } else if constexpr (std::is_same_v<T, action::StartJob>) {
              start_job(act.job);
            } else if constexpr (std::is_same_v<T, action::CancelJob>) {
              if (auto it = process_by_job_.find(act.job_id); it != process_by_job_.end()) {
                logger_->info("job {}: cancelling: {}", act.job_id, act.reason);
                (void)runner_.cancel(it->second);
              }
            } else if constexpr (std::is_same_v<T, action::NotifyPreemption>) {
              if (auto it = process_by_job_.find(act.job_id); it != process_by_job_.end()) {
                (void)runner_.signal(it->second, SIGUSR1);
              }
            } else if constexpr (std::is_same_v<T, action::Log>) {
              switch (act.severity) {
                case action::Severity::debug: logger_->debug("{}", act.text); break;
                case action::Severity::info: logger_->info("{}", act.text); break;
                case action::Severity::warn: logger_->warn("{}", act.text); break;
                case action::Severity::error: logger_->error("{}", act.text); break;
              }
            }
          },
          *a);
    }
  }

  AgentConfig config_;
  KeyPair keys_;
  std::string coordinator_key_;
  std::unique_ptr<drivers::Driver> driver_;
  std::shared_ptr<spdlog::logger> logger_;
  AgentCore core_;
  ProcessRunner runner_;
  protocol::CodecLimits limits_;
  zmq::context_t context_;
  std::unique_ptr<zmq::socket_t> socket_;
  std::unique_ptr<transport::HandshakeMonitor> monitor_;
  bool auth_error_logged_ = false;
  int connection_count_ = 0;
  std::uint64_t next_message_id_ = 1;
  std::map<std::uint64_t, ProcessId> process_by_job_;
  std::map<ProcessId, RunningJob> jobs_by_process_;
};

}  // namespace

Result<AgentIdentity> discover_identity(const AgentConfig& config, drivers::Driver& driver) {
  AgentIdentity identity;
  identity.node_id = config.node_id;
  identity.agent_version = KILN_VERSION;
  auto version = driver.driver_version();
  if (!version) return tl::unexpected(version.error());
  identity.driver_version = *version;
  auto count = driver.chip_count();
  if (!count) return tl::unexpected(count.error());
  for (std::uint32_t i = 0; i < *count; ++i) {
    auto chip = driver.chip_identity(i);
    if (!chip) return tl::unexpected(chip.error());
    auto firmware = driver.firmware_slots(i);
    if (!firmware) return tl::unexpected(firmware.error());
    if (identity.hardware_revision.empty()) identity.hardware_revision = chip->hardware_revision;
    identity.chips.push_back(protocol::ChipInfo{i, chip->serial, firmware->active_version(),
                                                static_cast<std::uint32_t>(std::max(0, chip->numa_node)), true});
  }
  if (config.hardware_revision_override) identity.hardware_revision = *config.hardware_revision_override;
  if (identity.hardware_revision.empty()) {
    return fail(Errc::config, fmt::format("the driver reports no chips and no hardware revision; set "
                                          "hardware_revision in {} or fix the driver options",
                                          config.config_path));
  }
  auto topology = discover_topology();
  if (topology) {
    identity.host.hostname = topology->hostname;
    identity.host.numa_nodes = static_cast<std::uint32_t>(std::max(1, topology->numa_nodes));
    identity.host.cores = static_cast<std::uint32_t>(std::max(1, topology->cores));
    identity.host.pci_devices = static_cast<std::uint32_t>(topology->pci_devices.size());
  }
  return identity;
}

Result<std::unique_ptr<AgentShell>> AgentShell::create(AgentConfig config) {
  auto logger = make_logger("agent:" + config.node_id, "info");
  if (!logger) return tl::unexpected(logger.error());
  auto keys = load_secret_key_file(config.agent_secret_key_file);
  if (!keys) return tl::unexpected(keys.error());
  auto coordinator_key = load_public_key_file(config.coordinator_public_key_file);
  if (!coordinator_key) return tl::unexpected(coordinator_key.error());
  auto driver = drivers::Driver::load(config.driver_library_path, config.driver_options);
  if (!driver) return tl::unexpected(driver.error());
  auto identity = discover_identity(config, **driver);
  if (!identity) return tl::unexpected(identity.error());
  std::error_code ec;
  fs::create_directories(config.work_dir, ec);
  if (ec) {
    return fail(Errc::io, fmt::format("cannot create work_dir {}: {}; fix work_dir in {}", config.work_dir,
                                      ec.message(), config.config_path));
  }
  (*logger)->info("node {} (revision {}, {} chips, driver {})", identity->node_id, identity->hardware_revision,
                  identity->chips.size(), identity->driver_version);
  return std::unique_ptr<AgentShell>(std::make_unique<Shell>(std::move(config), std::move(*keys),
                                                             std::move(*coordinator_key), std::move(*driver),
                                                             std::move(*identity), *logger));
}

}  // namespace kiln::agent
