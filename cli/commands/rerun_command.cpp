// kiln rerun JOB: a stored result again, from its recorded bundle, config and seed, on a node of
// the same hardware revision, and whether it reproduced (docs/qualification.md,
// "Reproducibility").
#include <chrono>
#include <iostream>
#include <algorithm>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/protocol/roles.h"
#include "common/stats/rng.h"
#include "cli/commands/all.h"
#include "cli/commands/job_view.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/ids.h"
#include "qualification/run_report.h"
#include "client/records_client.h"
#include "qualification/shell/reproduction.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

// How long one watch of a rerun waits for a change (under the minute after which /metrics no
// longer times a request, as `kiln result --wait`), and how often an older coordinator is asked.
constexpr std::uint32_t kRerunWatchMs = 50000;
constexpr auto kRerunPollInterval = std::chrono::milliseconds(250);

// A run's measure job, found in the run reports the coordinator holds, read newest first until
// found: the job to rerun is most often of a recent run, so this reads the latest pages, not the
// whole history (all of it only for a job no run measured).
struct Measured {
  std::string run_id;
  std::string model;
  std::string revision;
  q::MeasuredJob job;
};

Result<std::optional<Measured>> find_measured(Client& client, std::uint64_t job_id) {
  std::optional<Measured> found;
  const auto measured_it = [&](const nlohmann::json& document) {
    auto report = q::report_outline_from_json(document);
    if (!report) return false;
    for (const auto& m : report->models) {
      if (m.measure_job && m.measure_job->has_job(job_id)) {
        found = Measured{report->run_id, m.model, m.revision, *m.measure_job};
        return true;
      }
    }
    return false;
  };
  if (auto read = qs::list_latest_runs(client, measured_it); !read) return tl::unexpected(read.error());
  return found;
}

// Why the job cannot be rerun and compared; nullopt when it can. A measure job needs a result
// document; any other job an outcome (it succeeded, or failed with an exit code).
std::optional<std::string> not_rerunnable(const protocol::JobDetail& detail, bool measure_job) {
  const auto& job = detail.job;
  if (!protocol::is_terminal(job.state)) {
    return fmt::format("job {} is still {}: it has no result to compare yet; wait for it (`kiln result {} --wait`), "
                       "then rerun it",
                       job.job_id, protocol::enum_name(job.state), job.job_id);
  }
  if (measure_job && (!qs::ended_with_result(job) || detail.result.empty())) {
    return fmt::format("job {} ended {}{}: it has no result document to compare; rerun a job that succeeded, or whose "
                       "outputs were wrong (exit 1)",
                       job.job_id, protocol::enum_name(job.state), job.detail.empty() ? "" : " (" + job.detail + ")");
  }
  if (measure_job) return std::nullopt;
  if (job.state != protocol::JobState::succeeded && job.state != protocol::JobState::failed) {
    return fmt::format("job {} ended {}{}: it has no outcome to compare; rerun a job that succeeded or failed",
                       job.job_id, protocol::enum_name(job.state), job.detail.empty() ? "" : " (" + job.detail + ")");
  }
  if (job.gang_size > 1) {
    return fmt::format("job {} is rank {} of a gang of {}: a rank alone is no result; rerun the run that measured the "
                       "model",
                       job.job_id, job.gang_rank, job.gang_size);
  }
  if (protocol::is_maintenance_workload(job.workload)) {
    return fmt::format("job {} is {}, maintenance rather than a result: run it again with `kiln diag` or `kiln "
                       "submit --workload {}`",
                       job.job_id, job.workload, job.workload);
  }
  return std::nullopt;
}

// The hardware revision the original ran on: its rerun runs on a node of the same one.
Result<std::string> revision_of(Client& client, const protocol::JobDetail& detail) {
  if (!detail.job.hardware_revision.empty()) return detail.job.hardware_revision;
  auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  for (const auto& node : nodes->nodes) {
    if (node.node_id == detail.job.node_id) return node.hardware_revision;
  }
  return fail(Errc::not_found, fmt::format("job {} ran on node {}, which the coordinator no longer knows, so its "
                                           "hardware revision is unknown; submit it again by hand with --rev",
                                           detail.job.job_id, detail.job.node_id));
}

int exit_code_for(q::Reproduction verdict) {
  switch (verdict) {
    case q::Reproduction::reproduced: return kExitOk;
    case q::Reproduction::not_reproduced: return kExitFailed;
    case q::Reproduction::inconclusive: return kExitInconclusive;
  }
  return kExitInconclusive;
}

class RerunCommand : public RemoteCommand {
 public:
  std::string name() const override { return "rerun"; }
  std::string help() const override {
    return "rerun a job from its recorded bundle, config and seed on its hardware revision, and say whether it "
           "reproduced";
  }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_text_, "job id (42 or J42): a qualification run's measure job, or any job that ended")->required();
    command.add_option("--wait-timeout", wait_timeout_, "how long to wait for the rerun (90s, 30m, 2h)")
        ->capture_default_str();
  }
  Status check_arguments() override {
    auto id = parse_job_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    job_id_ = *id;
    auto timeout_ms = parse_duration_ms(wait_timeout_, "--wait-timeout");
    if (!timeout_ms) return tl::unexpected(timeout_ms.error());
    wait_timeout_ms_ = static_cast<DurationMs>(*timeout_ms);
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    auto original = expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{job_id_}));
    if (!original) return report(original.error());
    auto measured = find_measured(client, job_id_);
    if (!measured) return report(measured.error());
    if (auto why = not_rerunnable(*original, measured->has_value())) return report(Error{Errc::invalid_argument, *why});
    // A measure job is submitted again as its run recorded it (a gang in a lease of as many whole
    // nodes); any other job as the coordinator accepted it.
    Measured found;
    if (*measured) {
      found = **measured;
    } else {
      auto revision = revision_of(client, *original);
      if (!revision) return report(revision.error());
      found = Measured{"", original->job.workload, *revision,
                       q::MeasuredJob{job_id_, protocol::to_json(original->submission).dump(), 0, {}}};
    }
    auto submission = qs::rerun_submission(found.job, "kiln rerun");
    if (!submission) return report(submission.error());
    auto me = expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
    if (!me) return report(me.error());
    if (!protocol::role_may_submit(me->role, submission->priority_class)) {
      return report(Error{Errc::unauthorized,
                          fmt::format("job {} ran in the {} class, which your role ({}) may not submit; rerun it with a "
                                      "key that may (ci, ops or admin)",
                                      job_id_, protocol::enum_name(submission->priority_class),
                                      protocol::enum_name(me->role))});
    }
    const q::QualificationModel model = qs::model_of(found.model, found.job);
    auto started = qs::start_rerun(client, found.job, found.revision, "kiln rerun", {});
    if (!started) return report(started.error());
    qs::RerunInFlight& rerun = *started;
    const std::string what = fmt::format("rerun of job {} ({} on revision {}{})", job_id_, found.model, found.revision,
                                         found.run_id.empty() ? "" : ", run " + found.run_id);
    if (rerun.nodes > 1) {
      std::cerr << fmt::format("lease L{}: {} whole nodes of revision {} for the {}, requested\n", rerun.lease_id,
                               rerun.nodes, found.revision, what);
    } else {
      std::cerr << fmt::format("job {}: {} queued\n", rerun.first_job_id(), what);
    }

    q::ReproductionCheck check;
    std::optional<protocol::JobDetail> rerun_detail;
    if (*measured) {
      auto result = follow(client, rerun, model, context.json());
      if (!result) return report(result.error());
      if (!*result) {
        check.detail = fmt::format("the rerun did not end within {}; `kiln result {} --wait` follows it",
                                   wait_timeout_, rerun.first_job_id());
      } else {
        auto before = qs::measured_result(client, found.job, model);
        if (!before) return report(before.error());
        // A result kiln reads (a benchmark report, a workload result): judged by qualification's gates.
        check = q::check_reproduction(*before, **result, stats::PerfGateOptions{},
                                      stats::derive_seed(stats::stable_hash("kiln rerun"), job_id_));
      }
    } else {
      auto after = wait_for_job(client, rerun.first_job_id(), context.json(), wait_timeout_ms_);
      if (!after) return report(after.error());
      rerun_detail = *after;
      const q::JobResult original_result = qs::read_job_result(*original, model);
      if (!protocol::is_terminal(after->job.state)) {
        check.detail = fmt::format("the rerun, job {}, did not end within {}; `kiln result {} --wait` follows it",
                                   rerun.first_job_id(), wait_timeout_, rerun.first_job_id());
      } else if (original_result.ran) {
        check = q::check_reproduction(original_result, qs::read_job_result(*after, model), stats::PerfGateOptions{},
                                      stats::derive_seed(stats::stable_hash("kiln rerun"), job_id_));
      } else {
        const auto ending = [](const protocol::JobDetail& detail) {
          return q::JobEnding{std::string(protocol::enum_name(detail.job.state)), detail.job.exit_code, detail.result};
        };
        check = q::check_outcome_reproduction(ending(*original), ending(*after));
      }
    }
    const std::string nodes = rerun_nodes(client, rerun);
    if (context.json()) {
      nlohmann::json out = q::to_json(check);
      out["job_id"] = job_id_;
      out["rerun_job_id"] = rerun.first_job_id();
      out["rerun_job_ids"] = rerun.job_ids;
      out["run_id"] = found.run_id;
      out["model"] = found.model;
      out["revision"] = found.revision;
      out["node_id"] = nodes;
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << fmt::format("job {}: {} on revision {}{}, rerun as job{} {}{}\n", job_id_, found.model,
                               found.revision, found.run_id.empty() ? "" : " (run " + found.run_id + ")",
                               rerun.job_ids.size() > 1 ? "s" : "", fmt::join(rerun.job_ids, ", "),
                               nodes.empty() ? "" : " on " + nodes);
      std::cout << fmt::format("{}{}: {}\n", check.verdict == q::Reproduction::not_reproduced ? "NOT REPRODUCED"
                                             : check.verdict == q::Reproduction::reproduced   ? "reproduced"
                                                                                               : "inconclusive",
                               check.gate.empty() ? "" : " (" + check.gate + ")", check.detail);
    }
    return exit_code_for(check.verdict);
  }

 private:
  // Follows a measure job's rerun to its result by watch_jobs (a request per change of its jobs
  // or its gang's lease), saying when a gang's lease is granted and its ranks submitted; nullopt
  // when it did not end within --wait-timeout.
  Result<std::optional<q::JobResult>> follow(Client& client, qs::RerunInFlight& rerun, const q::QualificationModel& model,
                                             bool quiet) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_timeout_ms_);
    qs::RerunFollower follower(client, kRerunWatchMs, kRerunPollInterval);
    follower.follow(rerun);
    std::size_t jobs_seen = rerun.job_ids.size();
    while (true) {
      const auto left_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left_ms <= 0) return std::nullopt;
      follower.set_wait_ms(static_cast<std::uint32_t>(std::min<std::int64_t>(left_ms, kRerunWatchMs)));
      if (auto ok = follower.wait(); !ok) return tl::unexpected(ok.error());
      auto result = follower.advance(rerun, model);
      if (!result) return result;
      if (!quiet && rerun.job_ids.size() != jobs_seen) {
        jobs_seen = rerun.job_ids.size();
        std::cerr << fmt::format("lease L{}: granted; jobs {}, ranks 0 to {} of the rerun\n", rerun.lease_id,
                                 fmt::join(rerun.job_ids, ", "), rerun.nodes - 1);
      }
      if (*result) return result;
    }
  }

  // Where the rerun ran: its nodes joined with '+', as a run names a gang's.
  static std::string rerun_nodes(Client& client, const qs::RerunInFlight& rerun) {
    std::vector<std::string> nodes;
    for (std::uint64_t id : rerun.job_ids) {
      auto detail = expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{id}));
      if (detail && !detail->job.node_id.empty()) nodes.push_back(detail->job.node_id);
    }
    return fmt::format("{}", fmt::join(nodes, "+"));
  }

  std::string id_text_;
  std::uint64_t job_id_ = 0;
  std::string wait_timeout_ = "30m";
  DurationMs wait_timeout_ms_ = 0;
};

}  // namespace

void add_rerun_command(CommandList& commands) { commands.push_back(std::make_unique<RerunCommand>()); }

}  // namespace kiln::cli
