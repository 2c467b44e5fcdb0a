#include "coordinator/qualification/shell/reproduction.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <ostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/protocol/json.h"
#include "common/stats/rng.h"
#include "coordinator/qualification/change.h"
#include "coordinator/qualification/run_measure.h"

namespace kiln::qualification::shell {

Result<protocol::SubmitJob> rerun_submission(const MeasuredJob& job, std::string_view purpose) {
  nlohmann::json document = nlohmann::json::parse(job.submission, nullptr, false);
  auto submission = protocol::from_json<protocol::SubmitJob>(document);
  if (!submission) {
    return fail(Errc::bad_message, fmt::format("the recorded submission of job {} is unreadable ({}); it cannot be "
                                               "rerun",
                                               job.job_id, submission.error().message));
  }
  submission->node_id.clear();
  submission->config_hash =
      sha256_hex(fmt::format("{}/rerun of job {} for {}", submission->config_hash, job.job_id, purpose));
  return submission;
}

bool ended_with_result(const protocol::JobSummary& job) {
  return job.state == protocol::JobState::succeeded || (job.state == protocol::JobState::failed && job.exit_code == 1);
}

JobResult read_job_result(const protocol::JobDetail& detail, const QualificationModel& model) {
  const auto& job = detail.job;
  JobResult result;
  if (ended_with_result(job) && !detail.result.empty()) {
    auto read = read_workload_result(detail.result, model);
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
  result.node_id = job.node_id;
  result.chips = job.chip_indices;
  return result;
}

QualificationModel model_of(const std::string& name, const MeasuredJob& job) {
  QualificationModel model;
  model.name = name;
  model.eval_threshold = job.eval_threshold;
  return model;
}

namespace {

class SampleRerun {
 public:
  SampleRerun(cli::Client& client, const std::vector<ReproductionPick>& picks, const std::string& run_id,
              const stats::PerfGateOptions& perf, std::uint64_t seed, const DriverOptions& options,
              const std::function<void(const std::vector<ReproductionReport>&)>& progress)
      : client_(client), picks_(picks), run_id_(run_id), perf_(perf), seed_(seed), options_(options),
        progress_(progress) {}

  Result<std::vector<ReproductionReport>> run() {
    if (auto ok = start(); !ok) return tl::unexpected(ok.error());
    progress_(reruns_);
    while (pending() > 0) {
      if (options_.stop != nullptr && options_.stop->load()) return stop("the qualifier is stopping");
      if (options_.may_continue) {
        if (auto ok = options_.may_continue(); !ok) return stop(ok.error().message);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
      if (collect()) progress_(reruns_);
    }
    return reruns_;
  }

 private:
  void say(const std::string& line) {
    if (options_.progress != nullptr) *options_.progress << line << "\n" << std::flush;
  }

  std::size_t pending() const {
    return static_cast<std::size_t>(
        std::count_if(reruns_.begin(), reruns_.end(), [](const ReproductionReport& r) { return !r.check; }));
  }

  Status start() {
    // A rerun this run submitted before its qualifier was restarted carries the same derived hash.
    std::map<std::string, std::uint64_t> submitted_before;
    if (auto list = cli::expect_reply<protocol::JobList>(client_.request(protocol::ListJobs{1000, false}))) {
      for (const auto& job : list->jobs) submitted_before.emplace(job.config_hash, job.job_id);
    }
    for (const ReproductionPick& pick : picks_) {
      ReproductionReport rerun{pick.run_id, pick.model, pick.revision, pick.job.job_id, 0, std::nullopt};
      auto submission = rerun_submission(pick.job, "run " + run_id_);
      if (!submission) {
        rerun.check = ReproductionCheck{Reproduction::inconclusive, "", submission.error().message, std::nullopt};
        reruns_.push_back(std::move(rerun));
        continue;
      }
      if (auto earlier = submitted_before.find(submission->config_hash); earlier != submitted_before.end()) {
        rerun.rerun_job_id = earlier->second;
        say(fmt::format("job {}: rerun of job {} ({} on revision {}), submitted by this run before: taken up",
                        rerun.rerun_job_id, pick.job.job_id, pick.model, pick.revision));
        reruns_.push_back(std::move(rerun));
        continue;
      }
      auto accepted = cli::expect_reply<protocol::JobAccepted>(client_.request(*submission));
      if (!accepted && for_now(accepted.error())) {
        return fail(accepted.error().code, "the coordinator did not take a rerun for now: " + accepted.error().message);
      }
      if (!accepted) {
        rerun.check = ReproductionCheck{Reproduction::inconclusive, "",
                                        "the coordinator refused the rerun: " + accepted.error().message, std::nullopt};
      } else {
        rerun.rerun_job_id = accepted->job_id;
        say(fmt::format("job {}: rerun of job {} ({} on revision {}, run {}) for reproducibility", accepted->job_id,
                        pick.job.job_id, pick.model, pick.revision, pick.run_id));
      }
      reruns_.push_back(std::move(rerun));
    }
    return {};
  }

  // Checks every rerun that ended; true when one did.
  bool collect() {
    bool changed = false;
    for (std::size_t i = 0; i < reruns_.size(); ++i) {
      ReproductionReport& rerun = reruns_[i];
      if (rerun.check) continue;
      auto after = cli::expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{rerun.rerun_job_id}));
      if (!after || !protocol::is_terminal(after->job.state)) continue;
      auto before = cli::expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{rerun.job_id}));
      if (!before && for_now(before.error())) continue;
      const QualificationModel model = model_of(picks_[i].model, picks_[i].job);
      JobResult original;
      if (before) {
        original = read_job_result(*before, model);
      } else {
        original.ran = false;
        original.detail = before.error().message;
      }
      rerun.check = check_reproduction(original, read_job_result(*after, model), perf_,
                                       stats::derive_seed(seed_, rerun.job_id));
      say(fmt::format("job {}: rerun of job {} ({} on revision {}): {}: {}", rerun.rerun_job_id, rerun.job_id,
                      rerun.model, rerun.revision, to_string(rerun.check->verdict), rerun.check->detail));
      changed = true;
    }
    return changed;
  }

  Result<std::vector<ReproductionReport>> stop(const std::string& why) {
    return fail(Errc::unavailable, fmt::format("run {} stopped during its reproducibility reruns ({}); they go on and "
                                               "are taken up when it is driven again",
                                               run_id_, why));
  }

  cli::Client& client_;
  const std::vector<ReproductionPick>& picks_;
  const std::string& run_id_;
  const stats::PerfGateOptions& perf_;
  std::uint64_t seed_;
  const DriverOptions& options_;
  const std::function<void(const std::vector<ReproductionReport>&)>& progress_;
  std::vector<ReproductionReport> reruns_;  // one per pick, in order
};

}  // namespace

Result<std::vector<ReproductionReport>> rerun_sample(
    cli::Client& client, const std::vector<ReproductionPick>& picks, const std::string& run_id,
    const stats::PerfGateOptions& perf, std::uint64_t seed, const DriverOptions& options,
    const std::function<void(const std::vector<ReproductionReport>&)>& progress) {
  return SampleRerun(client, picks, run_id, perf, seed, options, progress).run();
}

}  // namespace kiln::qualification::shell
