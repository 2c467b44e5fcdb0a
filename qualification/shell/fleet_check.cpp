#include "qualification/shell/fleet_check.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <ostream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "client/job_watcher.h"
#include "qualification/shell/reproduction.h"

namespace kiln::qualification::shell {

namespace {

// protocol quarantine_node: reason str 1..4096.
constexpr std::size_t kMaxQuarantineReasonBytes = 4096;
// How long one watch of the check's jobs waits for a change: a stop of the qualifier, and the
// check's own wait, are honoured at least this often.
constexpr std::uint32_t kCheckWatchMs = 5000;

struct CheckJob {
  std::size_t pick = 0;
  std::string node_id;
  std::uint64_t job_id = 0;
};

class FleetCheck {
 public:
  FleetCheck(cli::Client& client, const RunReport& report, const FleetCheckSettings& settings,
             const DriverOptions& options, TicketSink& sink, std::vector<FleetCheckPick> picks)
      : client_(client), report_(report), settings_(settings), options_(options), sink_(sink),
        picks_(std::move(picks)), watcher_(client, kCheckWatchMs, std::chrono::milliseconds(options.poll_interval_ms)) {}

  Result<FleetCheckReport> run(TimeMs now_ms) {
    if (picks_.empty()) {
      say("fleet check: no model of the run ran correctly on one node; no node is compared");
      return out_;
    }
    if (auto ok = submit(); !ok) return tl::unexpected(ok.error());
    const auto started = std::chrono::steady_clock::now();
    while (!in_flight_.empty()) {
      if (std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(settings_.wait_ms)) {
        give_up_waiting();
        break;
      }
      if (options_.stop != nullptr && options_.stop->load()) return stop("the qualifier is stopping");
      if (options_.may_continue) {
        if (auto ok = options_.may_continue(); !ok) return stop(ok.error().message);
      }
      auto changed = watcher_.changes();
      if (!changed && !for_now(changed.error())) return tl::unexpected(changed.error());
      if (!changed) {
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
        continue;
      }
      for (const protocol::JobSummary& job : changed->jobs) {
        if (protocol::is_terminal(job.state)) ended_.insert(job.job_id);
      }
      if (auto ok = collect(); !ok) return tl::unexpected(ok.error());
    }
    out_.findings = find_slow_nodes(batches_, settings_.outliers);
    for (const SlowNode& node : out_.findings.slow_nodes) send_to_lab(node, now_ms);
    return out_;
  }

 private:
  void say(const std::string& line) {
    if (options_.progress != nullptr) *options_.progress << line << "\n" << std::flush;
  }

  Status submit() {
    auto nodes = cli::expect_reply<protocol::NodeList>(client_.request(protocol::ListNodes{}));
    if (!nodes) return tl::unexpected(nodes.error());
    // A check this run submitted before its qualifier was restarted carries the same derived hash.
    const std::map<std::string, std::uint64_t> submitted_before = listed_config_hashes(client_);
    std::map<std::string, std::vector<std::string>> up;  // revision -> its nodes that take work
    for (const protocol::NodeSummary& node : nodes->nodes) {
      if (node.state == protocol::NodeState::up) up[node.hardware_revision].push_back(node.node_id);
    }
    for (std::size_t p = 0; p < picks_.size(); ++p) {
      const FleetCheckPick& pick = picks_[p];
      const std::vector<std::string>& peers = up[pick.revision];
      if (peers.size() < settings_.outliers.min_nodes) {
        const std::string why = fmt::format("revision {} has {} node{} up, fewer than the {} a comparison needs",
                                            pick.revision, peers.size(), peers.size() == 1 ? "" : "s",
                                            settings_.outliers.min_nodes);
        if (std::find(out_.not_checked.begin(), out_.not_checked.end(), why) == out_.not_checked.end()) {
          out_.not_checked.push_back(why);
          say("fleet check: " + why + "; its nodes are not compared");
        }
        continue;
      }
      out_.models.push_back(fmt::format("{} on revision {}", pick.model, pick.revision));
      std::vector<std::string> on;
      for (const std::string& node_id : peers) {
        auto submission =
            rerun_submission(pick.job, fmt::format("the fleet check of run {} on node {}", report_.run_id, node_id));
        if (!submission) return tl::unexpected(submission.error());
        submission->node_id = node_id;
        submission->hardware_revision = pick.revision;
        std::uint64_t job_id = 0;
        if (auto earlier = submitted_before.find(submission->config_hash); earlier != submitted_before.end()) {
          job_id = earlier->second;
        } else {
          auto accepted = cli::expect_reply<protocol::JobAccepted>(client_.request(*submission));
          if (!accepted && for_now(accepted.error())) {
            return fail(accepted.error().code, "the coordinator did not take a fleet-check job for now: " +
                                                   accepted.error().message);
          }
          if (!accepted) {
            ++out_.jobs_not_run;
            say(fmt::format("fleet check: {} on node {} was refused: {}", pick.model, node_id,
                            accepted.error().message));
            continue;
          }
          job_id = accepted->job_id;
        }
        in_flight_.push_back({p, node_id, job_id});
        watcher_.follow(job_id);
        out_.job_ids.push_back(job_id);
        on.push_back(fmt::format("{} (job {})", node_id, job_id));
      }
      say(fmt::format("fleet check: {} on revision {} on every node up: {}", pick.model, pick.revision,
                      fmt::join(on, ", ")));
    }
    return {};
  }

  // Reads every job heard to end (watch_jobs: a request per change of a job, not per poll).
  Status collect() {
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      if (ended_.count(it->job_id) == 0) {
        ++it;
        continue;
      }
      auto detail = cli::expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{it->job_id}));
      if (!detail && for_now(detail.error())) return {};
      if (!detail) return tl::unexpected(detail.error());
      if (!protocol::is_terminal(detail->job.state)) {
        ++it;
        continue;
      }
      const FleetCheckPick& pick = picks_[it->pick];
      const JobResult result = read_job_result(*detail, model_of(pick.model, pick.job));
      if (!result.ran) {
        ++out_.jobs_not_run;
        say(fmt::format("fleet check: {} on node {} did not run: {}", pick.model, it->node_id, result.detail));
      } else {
        add_batch(pick, report_.candidate_bundle_id, it->node_id, result.candidate_samples);
        if (auto baseline = report_.baseline_bundle_ids.find(pick.revision); baseline != report_.baseline_bundle_ids.end()) {
          add_batch(pick, baseline->second, it->node_id, result.baseline_samples);
        }
      }
      watcher_.forget(it->job_id);
      ended_.erase(it->job_id);
      it = in_flight_.erase(it);
    }
    return {};
  }

  // A node busy for longer (a developer's lease of hours) is left out rather than holding the nightly.
  void give_up_waiting() {
    for (const CheckJob& job : in_flight_) {
      (void)client_.request(protocol::CancelJob{job.job_id});
      ++out_.jobs_not_run;
      say(fmt::format("fleet check: {} on node {} (job {}) did not end within {} ms; cancelled, the node has fewer "
                      "samples",
                      picks_[job.pick].model, job.node_id, job.job_id, settings_.wait_ms));
    }
    in_flight_.clear();
  }

  void add_batch(const FleetCheckPick& pick, const std::string& bundle_id, const std::string& node_id,
                 const std::vector<double>& samples) {
    if (!samples.empty()) batches_.push_back({pick.revision, bundle_id, pick.model, node_id, samples});
  }

  // Out of service until diagnostics pass, as a failed health probe does, and a ticket to the lab.
  void send_to_lab(const SlowNode& node, TimeMs now_ms) {
    const std::string reason = fmt::format("fleet check of run {}: {}", report_.run_id, node.describe());
    auto quarantined = cli::expect_reply<protocol::Ok>(client_.request(
        protocol::QuarantineNode{node.node_id, reason.substr(0, kMaxQuarantineReasonBytes), settings_.lab_team}));
    std::string action = quarantined ? fmt::format("node {} quarantined for the {} (diagnostics)", node.node_id,
                                                   settings_.lab_team)
                                     : fmt::format("node {} could not be quarantined ({})", node.node_id,
                                                   quarantined.error().message);
    FleetSpeedFindings alone;
    alone.slow_nodes.push_back(node);
    const Ticket ticket = make_ticket(
        TicketKind::hardware_suspect, settings_.lab_team,
        fmt::format("node {} (revision {}) runs {:.0f}% slower than the other nodes of its revision", node.node_id,
                    node.revision, -node.effect * 100.0),
        "node:" + node.node_id, std::nullopt,
        nlohmann::json{{"run_id", report_.run_id}, {"fleet_check", fleet_findings_json(alone)}}.dump(), now_ms);
    auto filed = sink_.file(ticket);
    if (filed) out_.tickets.push_back(ticket);
    action += filed ? fmt::format(", ticket {}{}", ticket.id, *filed == FileResult::duplicate ? " (filed before)" : "")
                    : fmt::format(", no ticket ({})", filed.error().message);
    say("fleet check: " + action + ": " + node.describe());
    out_.actions.push_back(std::move(action));
  }

  Result<FleetCheckReport> stop(const std::string& why) {
    return fail(Errc::unavailable, fmt::format("run {} stopped during its fleet check ({}); its jobs go on and are "
                                               "taken up when it is driven again",
                                               report_.run_id, why));
  }

  cli::Client& client_;
  const RunReport& report_;
  const FleetCheckSettings& settings_;
  const DriverOptions& options_;
  TicketSink& sink_;
  std::vector<FleetCheckPick> picks_;
  std::vector<CheckJob> in_flight_;
  cli::JobWatcher watcher_;
  std::set<std::uint64_t> ended_;  // jobs in flight heard to end, to be read
  std::vector<NodeThroughput> batches_;
  FleetCheckReport out_;
};

}  // namespace

Result<FleetCheckReport> check_fleet_speed(cli::Client& client, const RunReport& report, const ModelSet& set,
                                           const FleetCheckSettings& settings, const DriverOptions& options,
                                           TicketSink& sink, TimeMs now_ms) {
  return FleetCheck(client, report, settings, options, sink,
                    fleet_check_picks(report, set, settings.models_per_revision))
      .run(now_ms);
}

void add_fleet_check(nlohmann::json& document, const FleetCheckReport& check) {
  nlohmann::json out = fleet_findings_json(check.findings);
  out["models"] = check.models;
  out["job_ids"] = check.job_ids;
  out["jobs_not_run"] = check.jobs_not_run;
  out["actions"] = check.actions;
  out["not_checked"] = check.not_checked;
  document["fleet_check"] = std::move(out);
  for (const Ticket& ticket : check.tickets) document["tickets"].push_back(nlohmann::json::parse(to_json_text(ticket)));
  std::string lines;
  for (const std::string& why : check.not_checked) lines += "  fleet check: " + why + "\n";
  if (!check.models.empty()) lines += fleet_findings_text(check.findings);
  for (const std::string& action : check.actions) lines += "  " + action + "\n";
  document["summary"] = document.value("summary", std::string()) + lines;
}

}  // namespace kiln::qualification::shell
