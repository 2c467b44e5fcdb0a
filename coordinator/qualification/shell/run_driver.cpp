#include "coordinator/qualification/shell/run_driver.h"

#include <chrono>
#include <map>
#include <ostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coordinator/qualification/shell/records_client.h"

namespace kiln::qualification::shell {
namespace {

using protocol::JobState;

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

protocol::PriorityClass class_for(JobPurpose purpose, Tier tier) {
  if (purpose == JobPurpose::bisect_probe) return protocol::PriorityClass::bisect;
  switch (tier) {
    case Tier::smoke: return protocol::PriorityClass::presubmit;
    case Tier::nightly: return protocol::PriorityClass::nightly;
    case Tier::release: return protocol::PriorityClass::release;
  }
  return protocol::PriorityClass::nightly;
}

struct InFlight {
  std::uint64_t tag = 0;
  std::uint64_t job_id = 0;  // 0: not accepted yet
  std::string model;
};

class Driver {
 public:
  Driver(cli::Client& client, QualificationRun& run, const ModelSet& set, const std::vector<Change>& history,
         BundleBuilder& builder, TicketSink& tickets, const DriverOptions& options)
      : client_(client), run_(run), set_(set), history_(history), builder_(builder), tickets_(tickets),
        options_(options) {}

  Result<RunReport> drive() {
    TimeMs last_record = 0;
    find_earlier_jobs();
    refresh_nodes();
    while (true) {
      if (auto ok = carry_out_actions(); !ok) return tl::unexpected(ok.error());
      if (run_.finished()) break;
      if (options_.stop != nullptr && options_.stop->load()) return stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
      refresh_nodes();
      if (auto ok = collect_results(); !ok) return tl::unexpected(ok.error());
      if (wall_now_ms() - last_record >= options_.record_interval_ms) {
        last_record = wall_now_ms();
        record();
      }
    }
    record();
    return run_.report();
  }

 private:
  void say(const std::string& line) {
    if (options_.progress != nullptr) *options_.progress << line << "\n" << std::flush;
  }

  void record() {
    const RunReport& report = run_.report();
    nlohmann::json document = to_json(report);
    document["summary"] = summary_text(report);
    if (auto ok = record_run(client_, report.run_id, document); !ok) {
      say("could not record the run's progress on the coordinator: " + ok.error().message);
    }
  }

  // Jobs this run submitted before (a driver that died and was started again): those still
  // queued or running, or ended with a result to read, are taken up by config hash.
  void find_earlier_jobs() {
    auto list = cli::expect_reply<protocol::JobList>(client_.request(protocol::ListJobs{1000, false}));
    if (!list) return;
    for (const auto& job : list->jobs) {
      if (job.config_hash.empty()) continue;
      const bool usable = !protocol::is_terminal(job.state) || job.state == JobState::succeeded ||
                          (job.state == JobState::failed && job.exit_code == 1);
      if (usable) submitted_before_.emplace(job.config_hash, job.job_id);
    }
  }

  void refresh_nodes() {
    auto list = cli::expect_reply<protocol::NodeList>(client_.request(protocol::ListNodes{}));
    if (!list) {
      say("could not list the nodes: " + list.error().message);
      return;
    }
    std::vector<NodeCandidate> nodes;
    for (const auto& n : list->nodes) {
      const bool healthy = n.state == protocol::NodeState::up && n.health != protocol::HealthStatus::fail;
      nodes.push_back(NodeCandidate{n.node_id, n.hardware_revision, healthy, n.chips_used == 0});
    }
    run_.set_nodes(std::move(nodes), wall_now_ms());
  }

  Status carry_out_actions() {
    while (auto action = run_.poll_action()) {
      Status status;
      std::visit([&](auto& a) { status = carry_out(a); }, *action);
      if (!status) return status;
    }
    return {};
  }

  Status carry_out(run_action::StartJob& start) {
    const JobRequest& request = start.request;
    auto job = job_for(request, run_.report().run_id, run_.report().tier, set_, options_);
    if (!job) {
      JobResult missing;
      missing.tag = request.tag;
      missing.ran = false;
      missing.detail = job.error().message;
      say(fmt::format("cannot run {}: {}", request.model, job.error().message));
      return run_.on_job_result(std::move(missing), wall_now_ms());
    }
    if (auto earlier = submitted_before_.find(job->config_hash); earlier != submitted_before_.end()) {
      const std::uint64_t job_id = earlier->second;
      submitted_before_.erase(earlier);
      in_flight_[job_id] = InFlight{request.tag, job_id, request.model};
      by_tag_[request.tag] = job_id;
      say(fmt::format("job {}: {} {} on revision {}, submitted by this run before: taken up", job_id,
                      to_string(request.purpose), request.model, request.revision));
      return {};
    }
    auto accepted = cli::expect_reply<protocol::JobAccepted>(client_.request(*job));
    if (!accepted) {
      if (accepted.error().code == Errc::timeout || accepted.error().code == Errc::io) {
        return fail(accepted.error().code, "the coordinator stopped answering: " + accepted.error().message);
      }
      JobResult refused;
      refused.tag = request.tag;
      refused.ran = false;
      refused.detail = "the coordinator refused the job: " + accepted.error().message;
      say(fmt::format("{} refused: {}", request.model, accepted.error().message));
      return run_.on_job_result(std::move(refused), wall_now_ms());
    }
    in_flight_[accepted->job_id] = InFlight{request.tag, accepted->job_id, request.model};
    by_tag_[request.tag] = accepted->job_id;
    say(fmt::format("job {}: {} {} on revision {}{}", accepted->job_id, to_string(request.purpose), request.model,
                    request.revision, request.node_id.empty() ? "" : " on " + request.node_id));
    return {};
  }

  Status carry_out(run_action::CancelJob& cancel) {
    auto it = by_tag_.find(cancel.tag);
    if (it == by_tag_.end()) return {};
    (void)client_.request(protocol::CancelJob{it->second});
    say(fmt::format("job {}: cancelled, its answer no longer matters", it->second));
    return {};
  }

  Status carry_out(run_action::BuildBundle& build) {
    auto bundle = builder_.build(history_, build.history_index);
    if (bundle) {
      if (auto recorded = record_bundle(client_, *bundle); !recorded) bundle = tl::unexpected(recorded.error());
    }
    if (bundle) {
      say(fmt::format("built bundle {} at change {}", bundle->id.substr(0, 12), history_[build.history_index].id));
    } else {
      say(fmt::format("could not build the bundle at change {}: {}", history_[build.history_index].id,
                      bundle.error().message));
    }
    run_.on_bundle_built(build.history_index, std::move(bundle), wall_now_ms());
    return {};
  }

  Status carry_out(run_action::FileTicket& file) {
    auto filed = tickets_.file(file.ticket);
    if (!filed) {
      say(fmt::format("could not file ticket {} for {}: {}", file.ticket.id, file.ticket.team, filed.error().message));
      return {};
    }
    say(fmt::format("ticket {} to {}: {}{}", file.ticket.id, file.ticket.team, file.ticket.title,
                    *filed == FileResult::duplicate ? " (filed before; not sent again)" : ""));
    return {};
  }

  Status carry_out(run_action::QuarantineNode& quarantine) {
    auto ok = cli::expect_reply<protocol::Ok>(
        client_.request(protocol::QuarantineNode{quarantine.node_id, quarantine.reason, "lab"}));
    say(ok ? fmt::format("node {} quarantined: {}", quarantine.node_id, quarantine.reason)
           : fmt::format("could not quarantine node {}: {}", quarantine.node_id, ok.error().message));
    return {};
  }

  Status carry_out(run_action::Log& log) {
    say(log.text);
    return {};
  }

  Status collect_results() {
    if (in_flight_.empty()) return {};
    auto list = cli::expect_reply<protocol::JobList>(client_.request(protocol::ListJobs{1000, false}));
    if (!list) return {};  // a slow answer: the next turn asks again
    std::map<std::uint64_t, JobState> states;
    for (const auto& job : list->jobs) states[job.job_id] = job.state;
    std::vector<std::uint64_t> ended;
    for (const auto& [job_id, flight] : in_flight_) {
      auto it = states.find(job_id);
      // Not among the newest: ask for it alone.
      if (it == states.end() || protocol::is_terminal(it->second)) ended.push_back(job_id);
    }
    for (std::uint64_t job_id : ended) {
      auto detail = cli::expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{job_id}));
      if (!detail) continue;
      if (!protocol::is_terminal(detail->job.state)) continue;
      const InFlight flight = in_flight_.at(job_id);
      in_flight_.erase(job_id);
      if (auto ok = run_.on_job_result(result_of(flight, *detail), wall_now_ms()); !ok) {
        say(fmt::format("job {}: {}", job_id, ok.error().message));
      }
      if (auto ok = carry_out_actions(); !ok) return ok;
    }
    return {};
  }

  JobResult result_of(const InFlight& flight, const protocol::JobDetail& detail) {
    JobResult result;
    const auto& job = detail.job;
    const QualificationModel* model = set_.find(flight.model);
    // Exit 1 with a result document: the workload ran and its outputs were wrong.
    const bool ran = job.state == JobState::succeeded || (job.state == JobState::failed && job.exit_code == 1);
    if (ran && model != nullptr && !detail.result.empty()) {
      auto read = read_workload_result(detail.result, *model);
      if (read) {
        result = std::move(*read);
      } else {
        result.ran = false;
        result.detail = "unreadable result: " + read.error().message;
      }
    } else {
      result.ran = false;
      result.detail = fmt::format("job {} {}: {}", job.job_id, protocol::enum_name(job.state), job.detail);
    }
    result.tag = flight.tag;
    result.node_id = job.node_id;
    result.chips = job.chip_indices;
    say(fmt::format("job {}: {} on {} ({}){}", job.job_id, protocol::enum_name(job.state), job.node_id, flight.model,
                    result.ran && !result.correct ? ": INCORRECT " + result.correctness_detail : ""));
    return result;
  }

  Result<RunReport> stop() {
    for (const auto& [job_id, flight] : in_flight_) (void)client_.request(protocol::CancelJob{job_id});
    record();
    return fail(Errc::unavailable, fmt::format("run {} stopped before its verdict; its {} running jobs were cancelled",
                                               run_.report().run_id, in_flight_.size()));
  }

  cli::Client& client_;
  QualificationRun& run_;
  const ModelSet& set_;
  const std::vector<Change>& history_;
  BundleBuilder& builder_;
  TicketSink& tickets_;
  const DriverOptions& options_;
  std::map<std::uint64_t, InFlight> in_flight_;  // by job id
  std::map<std::uint64_t, std::uint64_t> by_tag_;
  std::map<std::string, std::uint64_t> submitted_before_;  // config hash -> job id
};

}  // namespace

Result<protocol::SubmitJob> job_for(const JobRequest& request, const std::string& run_id, Tier tier,
                                    const ModelSet& set, const DriverOptions& options) {
  const QualificationModel* model = set.find(request.model);
  if (model == nullptr) {
    return fail(Errc::not_found, fmt::format("model {} is not in the qualification set", request.model));
  }
  if (!model->workload) {
    return fail(Errc::config, fmt::format("model {} declares no workload; add `workload = ...` to its [[model]]",
                                          model->name));
  }
  protocol::SubmitJob job;
  job.workload = options.workload;
  job.args = {"--model", *model->workload, "--data-seed", std::to_string(model->data_seed),
              "--golden", options.golden_dir.string(),
              "--stack-effects", stack_effects_path(options.bundle_dir, request.bundle_id).string()};
  if (!request.baseline_bundle_id.empty() && request.repeats_per_side > 0) {
    job.args.push_back("--baseline-stack-effects");
    job.args.push_back(stack_effects_path(options.bundle_dir, request.baseline_bundle_id).string());
  }
  job.chips = static_cast<std::uint32_t>(request.chips);
  job.hardware_revision = request.revision;
  job.node_id = request.node_id;
  job.priority_class = class_for(request.purpose, tier);
  // The model's expected minutes, three times over, and at least 10 minutes.
  job.timeout_ms = static_cast<std::uint32_t>(std::max<DurationMs>(10 * kMinuteMs, 3 * model->minutes * kMinuteMs));
  job.max_attempts = 2;
  job.seed = request.seed;
  job.benchmark.repeats = request.repeats_per_side;
  job.benchmark.warmup_min = model->benchmark.warmup_min;
  job.benchmark.warmup_max = model->benchmark.warmup_max;
  job.benchmark.steady_window = model->benchmark.steady_window;
  job.benchmark.steady_tolerance_ppm = static_cast<std::uint32_t>(model->benchmark.steady_tolerance * 1e6 + 0.5);
  job.bundle_id = request.bundle_id;
  const nlohmann::json config = {{"run", run_id},               {"workload", job.workload},   {"args", job.args},
                                 {"chips", job.chips},         {"revision", job.hardware_revision},
                                 {"seed", job.seed},           {"repeats", job.benchmark.repeats},
                                 {"bundle", request.bundle_id}, {"baseline", request.baseline_bundle_id}};
  job.config_hash = sha256_hex(config.dump());
  return job;
}

Result<RunReport> drive_run(cli::Client& client, QualificationRun& run, const ModelSet& set,
                            const std::vector<Change>& history, BundleBuilder& builder, TicketSink& tickets,
                            const DriverOptions& options) {
  return Driver(client, run, set, history, builder, tickets, options).drive();
}

}  // namespace kiln::qualification::shell
