// The agent's shell as a class (agent_shell.h gives the interface): the loop over the
// coordinator's socket, the local socket and the processes it runs (agent_shell.cpp), and the
// jobs, probes and artifact fetches it starts and collects (agent_shell_jobs.cpp).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "agent/bench/bench.h"
#include "agent/bench/workload_exit.h"
#include "agent/core/agent_core.h"
#include "agent/host/containment.h"
#include "agent/shell/agent_shell.h"
#include "agent/shell/agent_status.h"
#include "agent/shell/local_socket.h"
#include "agent/shell/telemetry_sampler.h"
#include "common/clock.h"
#include "common/http/loop_question.h"
#include "common/http/server.h"
#include "common/logging.h"
#include "common/process/process_runner.h"
#include "common/transport/zmq_transport.h"

namespace kiln::agent::detail {

std::string mebibytes(std::uint64_t bytes);

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
        std::shared_ptr<spdlog::logger> logger, const ContainmentChoice& containment);

  // /metrics, when [http] listen is set. What the agent knows of its chips and its session is
  // this loop's state: the HTTP thread asks the loop (LoopQuestion), which renders between two
  // events. The chips' readings come from the telemetry thread, which reads every chip that
  // answered at start-up each second with its own driver handle, so a wedged chip never stalls
  // the loop or a scrape; its readings then age out of the page.
  Status serve_metrics();

  Status run(const std::atomic<bool>& stop) override;

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

  void serve_local_requests();

  AgentStatus status() const;

  std::string metrics_text() const;

  void clean_job_dirs_if_due();

  void start_probe();

  static protocol::HealthReport probe_failure(const std::string& reason, const std::string& message);

  void own_process_ended(const OwnProcess& own, const ProcessExit& exit);

  void receive_all();

  void collect_finished();

  JobEnded ended_from(const RunningJob& job, const ProcessExit& exit);
  void judge_exit(const RunningJob& job, const ProcessExit& exit, JobEnded& ended);

  void report_start_failure(std::uint64_t job_id, const std::string& why,
                            protocol::JobOutcome outcome = protocol::JobOutcome::failed_to_start);

  // A job that names artifacts starts once `kiln-agent fetch-artifacts` has them in the cache,
  // verified: a process of its own, so a long download never stalls the heartbeats.
  void start_job(const protocol::JobStart& start);

  void artifacts_fetched(const protocol::JobStart& start, const ProcessExit& exit);

  // The cache back under its limit, keeping what running and starting jobs use.
  void evict_artifacts();

  void launch_job(const protocol::JobStart& start, std::vector<std::string> args);

  void update_telemetry_watch();

  void connect();

  void send(protocol::Body body, std::uint64_t id, std::uint64_t corr);

  void carry_out_actions();

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

}  // namespace kiln::agent::detail
