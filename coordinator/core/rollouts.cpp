#include "coordinator/core/rollouts.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/text/utf8.h"
#include "coordinator/core/job_table.h"

namespace kiln::coordinator {
namespace {

using protocol::JobState;
using protocol::NodeState;

constexpr std::string_view phase_name(int phase) {
  constexpr std::string_view names[] = {"idle", "blocked", "canary", "waves", "converged", "halted"};
  return names[phase];
}

// "1.0.0", or "1.0.0 (6), 2.0.0 (2)" while the chips disagree; empty versions are chips the
// agent could not read.
std::string firmware_of(const protocol::NodeSummary& node) {
  std::map<std::string, int> count;
  for (const auto& chip : node.chips) {
    if (!chip.firmware_version.empty()) ++count[chip.firmware_version];
  }
  if (count.size() == 1) return count.begin()->first;
  std::string out;
  for (const auto& [version, n] : count) out += fmt::format("{}{} ({})", out.empty() ? "" : ", ", version, n);
  return out;
}

bool runs_firmware(const protocol::NodeSummary& node, const std::string& version) {
  bool any = false;
  for (const auto& chip : node.chips) {
    if (chip.firmware_version.empty()) continue;
    if (chip.firmware_version != version) return false;
    any = true;
  }
  return any;
}

// The layers a node still has to install, in the order they are installed: the driver first, so
// the firmware is flashed and checked by the driver the bundle ships with. A layer the bundle
// does not pin is never installed.
std::vector<std::string_view> layers_to_install(const DesiredEnvironment& environment,
                                                const protocol::NodeSummary& node) {
  std::vector<std::string_view> out;
  if (!environment.driver.version.empty() && node.driver_version != environment.driver.version) {
    out.push_back("driver");
  }
  if (!environment.firmware.version.empty() && !runs_firmware(node, environment.firmware.version)) {
    out.push_back("firmware");
  }
  return out;
}

const DesiredPackage& package_of(const DesiredEnvironment& environment, std::string_view layer) {
  return layer == "driver" ? environment.driver : environment.firmware;
}

// Why an install job failed, for `kiln envs`: its install report's reason (docs/health.md) where
// the node wrote one, since the job's own detail only says how the install process exited.
std::string install_failure(const JobRecord& job) {
  const auto report = nlohmann::json::parse(job.result, nullptr, /*allow_exceptions=*/false);
  const auto reason = report.is_object() ? report.find("reason") : report.end();
  const bool has_reason = reason != report.end() && reason->is_string() && !reason->get<std::string>().empty();
  const std::string detail = fmt::format("install job {} {}: {}", job.summary.job_id,
                                         protocol::enum_name(job.summary.state),
                                         has_reason ? reason->get<std::string>() : job.summary.detail);
  return text::utf8_head(detail, protocol::kMessageText.max_len);
}


}  // namespace

std::vector<InstallDue> Rollouts::set_desired(DesiredFleet fleet, TimeMs now, const JobTable& jobs) {
  for (const DesiredEnvironment& environment : fleet.environments) {
    const auto before = std::find_if(fleet_.environments.begin(), fleet_.environments.end(),
                                     [&](const DesiredEnvironment& e) { return e.name == environment.name; });
    if (before == fleet_.environments.end() || before->bundle_id != environment.bundle_id) {
      ctx_.log(action::Severity::info,
               fmt::format("environment {} should run bundle {} (driver {}, firmware {}) on {} nodes{}, commit {}",
                           environment.name, environment.bundle_id.empty() ? "none" : environment.bundle_id.substr(0, 12),
                           environment.driver.version.empty() ? "-" : environment.driver.version,
                           environment.firmware.version.empty() ? "-" : environment.firmware.version,
                           members(environment).size(),
                           environment.node_labels.empty()
                               ? ""
                               : fmt::format(" (labels {})", fmt::join(environment.node_labels, ", ")),
                           fleet.commit.substr(0, 12)));
    }
  }
  fleet_ = std::move(fleet);
  problem_.clear();
  dirty_ = true;
  return advance(now, jobs);
}

std::vector<const JobRecord*> Rollouts::rollout_jobs(const JobTable& jobs) const {
  std::vector<const JobRecord*> out;
  for (const auto& [node_id, job_id] : jobs.newest_rollout_installs()) {
    if (const JobRecord* job = jobs.find(job_id)) out.push_back(job);
  }
  return out;
}

bool Rollouts::is_rollout_job(const JobRecord& job, const DesiredEnvironment& environment) const {
  if (job.summary.bundle_id != environment.bundle_id) return false;
  const auto installs = [&](const DesiredPackage& package) {
    return !package.sha256.empty() &&
           std::find(job.summary.args.begin(), job.summary.args.end(), package.sha256) != job.summary.args.end();
  };
  return installs(environment.driver) || installs(environment.firmware);
}

std::vector<std::string> Rollouts::members(const DesiredEnvironment& environment) const {
  std::vector<std::string> out = environment.nodes;
  if (environment.node_labels.empty()) return out;
  for (const auto& [id, node] : ctx_.registry.nodes()) {  // ordered by node id
    const auto& labels = node.summary.labels;
    const bool selected = std::all_of(environment.node_labels.begin(), environment.node_labels.end(),
                                      [&](const std::string& wanted) {
                                        return std::find(labels.begin(), labels.end(), wanted) != labels.end();
                                      });
    if (selected && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

Rollouts::Assessment Rollouts::assess(const DesiredEnvironment& environment,
                                      const std::vector<const JobRecord*>& rollout_jobs) const {
  Assessment out;
  const std::vector<std::string> nodes = members(environment);
  // The newest install a rollout asked of each node, where it is of this bundle's driver or firmware.
  std::map<std::string, const JobRecord*> latest;
  if (!environment.bundle_id.empty()) {
    for (const JobRecord* job : rollout_jobs) {
      if (is_rollout_job(*job, environment)) latest[job->requested_node_id] = job;
    }
  }
  // Half-converged nodes first, so a node that installed its driver goes on with its firmware
  // before another node starts.
  std::vector<std::string> drifted_started;
  std::vector<std::string> drifted;
  std::size_t in_flight = 0;
  std::size_t in_sync = 0;
  // The canary has passed once a node this bundle installed on runs all of it, not merely once
  // one of its installs succeeded.
  bool canary_passed = false;
  std::string failure;
  for (const std::string& node_id : nodes) {
    protocol::NodeConvergence node{node_id, "unknown", environment.firmware.version, "", environment.driver.version,
                                   "", 0, ""};
    const NodeRecord* record = ctx_.registry.nodes().count(node_id) ? &ctx_.registry.nodes().at(node_id) : nullptr;
    const auto job = latest.find(node_id);
    const bool started = job != latest.end();
    if (started) node.install_job_id = job->second->summary.job_id;
    if (!record) {
      node.detail = "not registered: no agent with this node id has connected";
    } else {
      node.actual_firmware = firmware_of(record->summary);
      node.actual_driver = record->summary.driver_version;
      const std::vector<std::string_view> layers =
          environment.bundle_id.empty() ? std::vector<std::string_view>{} : layers_to_install(environment, record->summary);
      const std::string driver_drift =
          std::find(layers.begin(), layers.end(), "driver") == layers.end()
              ? ""
              : fmt::format("driver {}, desired {}",
                            record->summary.driver_version.empty() ? "unknown" : record->summary.driver_version,
                            environment.driver.version);
      const NodeState state = record->summary.state;
      if (started && !protocol::is_terminal(job->second->summary.state)) {
        node.state = "converging";
        node.detail = job->second->summary.state == JobState::queued
                          ? fmt::format("install job {} waits for the node to drain", node.install_job_id)
                          : fmt::format("install job {} is {}", node.install_job_id,
                                        protocol::enum_name(job->second->summary.state));
        ++in_flight;
      } else if (layers.empty()) {
        node.state = "in_sync";
        ++in_sync;
        if (started) canary_passed = true;
      } else if (started && job->second->summary.state != JobState::succeeded) {
        node.state = "failed";
        node.detail = install_failure(*job->second);
        if (failure.empty()) failure = fmt::format("node {}: {}", node_id, node.detail);
      } else if (state == NodeState::quarantined || state == NodeState::lost ||
                 !ctx_.registry.has_session(node_id)) {
        node.state = "unavailable";
        node.detail = state == NodeState::quarantined
                          ? "quarantined (" + record->summary.quarantine_reason + "); it converges once released"
                          : "not connected; it converges once its agent is back";
      } else {
        node.state = "drifted";
        node.detail = driver_drift;
        (started ? drifted_started : drifted).push_back(node_id);
      }
    }
    out.nodes.push_back(std::move(node));
  }
  drifted.insert(drifted.begin(), drifted_started.begin(), drifted_started.end());
  if (environment.bundle_id.empty()) {
    out.phase = Phase::idle;
    out.detail = "nothing promoted to this environment yet";
  } else if (!environment.blocked.empty()) {
    out.phase = Phase::blocked;
    out.detail = environment.blocked;
  } else if (!failure.empty()) {
    out.phase = Phase::halted;
    out.detail = fmt::format("stopped after a node failed to converge ({}); nothing more is installed for this "
                             "bundle: roll the environment back or promote a fixed bundle",
                             failure);
  } else if (nodes.empty()) {
    out.phase = Phase::idle;
    out.detail = environment.node_labels.empty()
                     ? "no nodes belong to it"
                     : fmt::format("no registered node has the labels {}; agents declare labels in agent.toml",
                                   fmt::join(environment.node_labels, ", "));
  } else if (in_sync == nodes.size()) {
    out.phase = Phase::converged;
  } else if (!canary_passed) {
    out.phase = Phase::canary;
    out.detail = "one node first; the rest once it converged";
    if (in_flight == 0 && !drifted.empty()) out.due.push_back(drifted.front());
  } else {
    out.phase = Phase::waves;
    const std::size_t wave = std::max<std::uint32_t>(1, ctx_.knobs.rollout_wave_size);
    out.detail = fmt::format("the canary converged; the rest {} at a time", wave);
    for (const std::string& node_id : drifted) {
      if (in_flight + out.due.size() >= wave) break;
      out.due.push_back(node_id);
    }
  }
  return out;
}

InstallDue Rollouts::install_due(const DesiredEnvironment& environment, const std::string& node_id) const {
  const auto node = ctx_.registry.nodes().find(node_id);
  KILN_ASSERT(node != ctx_.registry.nodes().end(), "only registered nodes are due an install");
  const std::vector<std::string_view> layers = layers_to_install(environment, node->second.summary);
  KILN_ASSERT(!layers.empty(), "only drifted nodes are due an install");
  const std::string layer(layers.front());
  const DesiredPackage& package = package_of(environment, layer);
  protocol::SubmitJob install;
  install.workload = std::string(protocol::kInstallWorkload);
  install.node_id = node_id;
  install.args = {"--kind", layer, "--version", package.version, "--sha256", package.sha256,
                  "{artifact:" + layer + "}"};
  install.artifacts = {protocol::ArtifactRef{layer, package.sha256, package.size_bytes}};
  install.bundle_id = environment.bundle_id;
  install.max_attempts = 1;
  return InstallDue{environment.name, layer, package.version, environment.bundle_id, node_id, std::move(install)};
}

void Rollouts::install_submitted(const InstallDue& install, const Result<std::uint64_t>& id) {
  if (!id) {
    ctx_.log(action::Severity::warn, fmt::format("environment {}: cannot install {} {} on node {}: {}",
                                                 install.environment, install.layer, install.version, install.node_id,
                                                 id.error().message));
    return;
  }
  ctx_.log(action::Severity::info, fmt::format("environment {}: job {} installs {} {} of bundle {} on node {}",
                                               install.environment, *id, install.layer, install.version,
                                               install.bundle_id.substr(0, 12), install.node_id));
}

std::vector<InstallDue> Rollouts::advance(TimeMs now, const JobTable& jobs) {
  if (!dirty_ && now < next_check_ms_) return {};
  dirty_ = false;
  next_check_ms_ = now + kRecheckMs;
  // Assessed by the installs asked before these: those due now are submitted after.
  const std::vector<const JobRecord*> asked = rollout_jobs(jobs);
  std::vector<InstallDue> due;
  for (const DesiredEnvironment& environment : fleet_.environments) {
    for (const std::string& node_id : assess(environment, asked).due) due.push_back(install_due(environment, node_id));
  }
  return due;
}

std::optional<TimeMs> Rollouts::next_deadline() const {
  if (fleet_.environments.empty()) return std::nullopt;
  return next_check_ms_;
}

protocol::EnvironmentList Rollouts::list(const JobTable& jobs) const {
  protocol::EnvironmentList out;
  out.repository = fleet_.repository;
  out.commit = fleet_.commit;
  out.problem = problem_;
  const std::vector<const JobRecord*> rollout = rollout_jobs(jobs);
  for (const DesiredEnvironment& environment : fleet_.environments) {
    Assessment assessed = assess(environment, rollout);
    out.environments.push_back(protocol::EnvironmentConvergence{environment.name, environment.bundle_id,
                                                                std::string(phase_name(static_cast<int>(assessed.phase))),
                                                                assessed.detail, std::move(assessed.nodes)});
  }
  return out;
}

}  // namespace kiln::coordinator
