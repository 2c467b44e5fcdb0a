// Rollouts: nodes converge on what the environments repository says their environment runs
// (docs/releases.md, "Convergence"). The shell reads the repository and hands in the desired
// state; this room compares it with what each node reported, and installs what differs with the
// verified install path (a kiln.install job, which drains the node first and rolls back a
// firmware that fails its check): one node first (the canary), then the rest, wave_size at a
// time. A node whose install fails is quarantined (AgentSessions) and the rollout of that bundle
// stops. Everything it decides is derived from the desired state, the nodes and the job table,
// so a coordinator restart resumes a rollout where it was, a halted one included.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "coordinator/core/core_context.h"
#include "coordinator/core/job_retention.h"

namespace kiln::coordinator {

class JobTable;

// One layer of the bundle that nodes install: its version and its package, by digest.
struct DesiredPackage {
  std::string version;           // empty: the bundle does not pin this layer
  std::string sha256;            // lowercase hex
  std::uint64_t size_bytes = 0;  // of the package in the coordinator's artifact store
};

// What one environment should run, as the shell read it from the repository.
struct DesiredEnvironment {
  std::string name;
  std::string bundle_id;  // empty: nothing promoted yet
  DesiredPackage firmware;
  DesiredPackage driver;  // installed before the firmware
  std::vector<std::string> nodes;
  // Besides `nodes`: every registered node whose labels include all of these (key=value).
  std::vector<std::string> node_labels;
  // Why the rollout cannot start (a package is not uploaded), in words for people; empty: it
  // can.
  std::string blocked;

  // Its packages by layer, in the order nodes install them.
  std::array<std::pair<std::string_view, DesiredPackage*>, 2> packages() {
    return {{{"driver", &driver}, {"firmware", &firmware}}};
  }
};

struct DesiredFleet {
  std::string repository;
  std::string commit;
  std::vector<DesiredEnvironment> environments;
};

// An install a rollout decided on: the router submits the job (JobTable::accept) and tells the
// rollout what came of it (Rollouts::install_submitted).
struct InstallDue {
  std::string environment;
  std::string layer;
  std::string version;
  std::string bundle_id;
  std::string node_id;
  protocol::SubmitJob job;
};

class Rollouts {
 public:
  explicit Rollouts(CoreContext context) : ctx_(context) {}

  // Who a rollout's installs are submitted by.
  static Caller submitter() { return Caller{std::string(kRolloutSubmitter), protocol::Role::ops}; }

  // The newest state of the repository; `problem` says why a newer one could not be read (the
  // fleet given before stays desired). The installs due now, in order.
  std::vector<InstallDue> set_desired(DesiredFleet fleet, TimeMs now, const JobTable& jobs);
  void set_problem(std::string problem) { problem_ = std::move(problem); }

  // The installs that are due, in order. Cheap; the router calls it on every tick, and it looks
  // again at most every kRecheckMs.
  std::vector<InstallDue> advance(TimeMs now, const JobTable& jobs);
  // The job submitted for an install, or why it was refused.
  void install_submitted(const InstallDue& install, const Result<std::uint64_t>& job_id);
  std::optional<TimeMs> next_deadline() const;

  protocol::EnvironmentList list(const JobTable& jobs) const;

  static constexpr TimeMs kRecheckMs = 1000;

 private:
  enum class Phase { idle, blocked, canary, waves, converged, halted };
  struct Assessment {
    Phase phase = Phase::idle;
    std::string detail;
    std::vector<protocol::NodeConvergence> nodes;
    std::vector<std::string> due;  // nodes to start installing now, in order
  };

  // The newest install a rollout asked of each node (what each environment's assessment
  // decides by), by node.
  std::vector<const JobRecord*> rollout_jobs(const JobTable& jobs) const;
  // The environment's nodes: those it lists, then those its labels select, by node id.
  std::vector<std::string> members(const DesiredEnvironment& environment) const;
  Assessment assess(const DesiredEnvironment& environment, const std::vector<const JobRecord*>& rollout_jobs) const;
  bool is_rollout_job(const JobRecord& job, const DesiredEnvironment& environment) const;
  InstallDue install_due(const DesiredEnvironment& environment, const std::string& node_id) const;

  CoreContext ctx_;
  DesiredFleet fleet_;
  std::string problem_;
  TimeMs next_check_ms_ = 0;
  bool dirty_ = false;  // the desired state changed: look at once
};

}  // namespace kiln::coordinator
