#include "qualification/shell/reproduction.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <ostream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/protocol/json.h"
#include "common/stats/rng.h"
#include "records/change.h"
#include "qualification/run_measure.h"
#include "qualification/shell/gang.h"

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
  result.node_quarantined = job.node_quarantined;
  return result;
}

std::map<std::string, std::uint64_t> listed_config_hashes(cli::Client& client) {
  std::map<std::string, std::uint64_t> hashes;
  if (auto list = cli::expect_reply<protocol::JobList>(client.request(protocol::ListJobs{1000, false}))) {
    for (const auto& job : list->jobs) hashes.emplace(job.config_hash, job.job_id);
  }
  return hashes;
}

Result<RerunInFlight> start_rerun(cli::Client& client, const MeasuredJob& original, const std::string& revision,
                                  std::string_view purpose,
                                  const std::map<std::string, std::uint64_t>& submitted_before) {
  auto submission = rerun_submission(original, purpose);
  if (!submission) return tl::unexpected(submission.error());
  submission->hardware_revision = revision;
  RerunInFlight rerun{original.job_id, *submission, revision, original.nodes(), 0, {}};
  for (int rank = 0; rank < rerun.nodes; ++rank) {
    const protocol::SubmitJob job = rerun.nodes == 1 ? rerun.submission : rank_job(rerun.submission, rank);
    auto earlier = submitted_before.find(job.config_hash);
    if (earlier == submitted_before.end()) break;
    rerun.job_ids.push_back(earlier->second);
  }
  if (rerun.job_ids.size() == static_cast<std::size_t>(rerun.nodes)) return rerun;
  rerun.job_ids.clear();
  if (rerun.nodes == 1) {
    auto accepted = cli::expect_reply<protocol::JobAccepted>(client.request(rerun.submission));
    if (!accepted) return tl::unexpected(accepted.error());
    rerun.job_ids.push_back(accepted->job_id);
    return rerun;
  }
  auto reply = client.request(gang_lease(rerun.submission, rerun.nodes, revision));
  if (!reply) return tl::unexpected(reply.error());
  rerun.lease_id = lease_id_of(*reply);
  if (rerun.lease_id == 0) {
    return fail(Errc::conflict, fmt::format("the coordinator refused a lease of {} nodes of revision {} for the rerun "
                                            "({})",
                                            rerun.nodes, revision, protocol::type_name(*reply)));
  }
  return rerun;
}

namespace {

JobResult not_run(std::string why) {
  JobResult result;
  result.ran = false;
  result.detail = std::move(why);
  return result;
}

// The jobs' results as one: nullopt while one of them runs.
Result<std::optional<JobResult>> ended_result(cli::Client& client, const std::vector<std::uint64_t>& job_ids,
                                              const QualificationModel& model) {
  std::vector<JobResult> ranks;
  for (std::uint64_t id : job_ids) {
    auto detail = cli::expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{id}));
    if (!detail) return tl::unexpected(detail.error());
    if (!protocol::is_terminal(detail->job.state)) return std::nullopt;
    ranks.push_back(read_job_result(*detail, model));
  }
  if (ranks.size() == 1) return std::move(ranks.front());
  return combine_ranks(0, std::move(ranks));
}

}  // namespace

void RerunFollower::follow(const RerunInFlight& rerun) {
  if (rerun.job_ids.empty()) {
    if (rerun.lease_id == 0 || leases_.count(rerun.lease_id) != 0) return;
    protocol::LeaseSummary not_heard_yet;  // pending, as it was asked for
    not_heard_yet.lease_id = rerun.lease_id;
    leases_.emplace(rerun.lease_id, not_heard_yet);
    watcher_.follow_lease(rerun.lease_id);
    return;
  }
  for (std::uint64_t id : rerun.job_ids) {
    if (jobs_.emplace(id, protocol::JobState::queued).second) watcher_.follow(id);
  }
}

void RerunFollower::forget(const RerunInFlight& rerun) {
  for (std::uint64_t id : rerun.job_ids) {
    jobs_.erase(id);
    watcher_.forget(id);
  }
  leases_.erase(rerun.lease_id);
  watcher_.forget_lease(rerun.lease_id);
}

Status RerunFollower::wait() {
  auto changed = watcher_.changes();
  if (!changed) return tl::unexpected(changed.error());
  for (const auto& job : changed->jobs) jobs_[job.job_id] = job.state;
  for (const auto& lease : changed->leases) leases_[lease.lease_id] = lease;
  return {};
}

Result<std::optional<JobResult>> RerunFollower::advance(RerunInFlight& rerun, const QualificationModel& model) {
  if (rerun.job_ids.empty()) {
    follow(rerun);
    const protocol::LeaseSummary& lease = leases_.at(rerun.lease_id);
    if (lease.state == protocol::LeaseState::ended) {
      forget(rerun);
      return not_run(fmt::format("lease L{} ended before the rerun ran: {}", rerun.lease_id, lease.detail));
    }
    if (lease.state != protocol::LeaseState::granted) return std::nullopt;
    protocol::SubmitGang ranks{rerun.lease_id, {}};
    for (int rank = 0; rank < rerun.nodes; ++rank) ranks.jobs.push_back(rank_job(rerun.submission, rank));
    auto accepted = cli::expect_reply<protocol::GangAccepted>(client_.request(ranks));
    if (!accepted && for_now(accepted.error())) return std::nullopt;
    if (!accepted) {
      forget(rerun);
      (void)client_.request(protocol::ReleaseLease{rerun.lease_id});
      return not_run(fmt::format("the coordinator refused the rerun's gang in lease L{}: {}", rerun.lease_id,
                                 accepted.error().message));
    }
    forget(rerun);
    rerun.job_ids = accepted->job_ids;
    follow(rerun);
    return std::nullopt;
  }
  follow(rerun);
  const bool all_ended = std::all_of(rerun.job_ids.begin(), rerun.job_ids.end(),
                                     [&](std::uint64_t id) { return protocol::is_terminal(jobs_.at(id)); });
  if (!all_ended) return std::nullopt;
  auto result = ended_result(client_, rerun.job_ids, model);
  if (result && *result) {
    forget(rerun);
    if (rerun.lease_id != 0) (void)client_.request(protocol::ReleaseLease{rerun.lease_id});
  }
  return result;
}

void cancel_rerun(cli::Client& client, const RerunInFlight& rerun) {
  for (std::uint64_t id : rerun.job_ids) (void)client.request(protocol::CancelJob{id});
  if (rerun.lease_id != 0) (void)client.request(protocol::ReleaseLease{rerun.lease_id});
}

Result<JobResult> measured_result(cli::Client& client, const MeasuredJob& original, const QualificationModel& model) {
  auto result = ended_result(client, original.rank_job_ids.empty() ? std::vector{original.job_id} : original.rank_job_ids,
                             model);
  if (!result) return tl::unexpected(result.error());
  if (!*result) return not_run(fmt::format("job {} has not ended", original.job_id));
  return std::move(**result);
}

QualificationModel model_of(const std::string& name, const MeasuredJob& job) {
  QualificationModel model;
  model.name = name;
  model.eval_threshold = job.eval_threshold;
  return model;
}

namespace {

// How long one wait for the reruns lasts: a stop of the qualifier is honoured at least this often.
constexpr std::uint32_t kFollowWaitMs = 5000;

class SampleRerun {
 public:
  SampleRerun(cli::Client& client, const std::vector<ReproductionPick>& picks, const std::string& run_id,
              const stats::PerfGateOptions& perf, std::uint64_t seed, const DriverOptions& options,
              const std::function<void(const std::vector<ReproductionReport>&)>& progress)
      : client_(client), picks_(picks), run_id_(run_id), perf_(perf), seed_(seed), options_(options),
        progress_(progress), follower_(client, kFollowWaitMs, std::chrono::milliseconds(options.poll_interval_ms)) {}

  Result<std::vector<ReproductionReport>> run() {
    if (auto ok = start(); !ok) return tl::unexpected(ok.error());
    progress_(reruns_);
    while (pending() > 0) {
      if (options_.stop != nullptr && options_.stop->load()) return stop("the qualifier is stopping");
      if (options_.may_continue) {
        if (auto ok = options_.may_continue(); !ok) return stop(ok.error().message);
      }
      if (auto ok = follower_.wait(); !ok) {
        if (!for_now(ok.error())) return tl::unexpected(ok.error());
        std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
        continue;
      }
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
    const std::map<std::string, std::uint64_t> submitted_before = listed_config_hashes(client_);
    for (const ReproductionPick& pick : picks_) {
      ReproductionReport rerun{pick.run_id, pick.model, pick.revision, pick.job.job_id, 0, std::nullopt};
      auto started = start_rerun(client_, pick.job, pick.revision, "run " + run_id_, submitted_before);
      if (!started && for_now(started.error())) {
        return fail(started.error().code, "the coordinator did not take a rerun for now: " + started.error().message);
      }
      if (!started) {
        rerun.check = ReproductionCheck{Reproduction::inconclusive, "", "the rerun could not start: " +
                                        started.error().message, std::nullopt};
      } else {
        rerun.rerun_job_id = started->first_job_id();
        say(fmt::format("{}: rerun of job {} ({} on revision {}, run {}) for reproducibility", describe(*started),
                        pick.job.job_id, pick.model, pick.revision, pick.run_id));
        follower_.follow(*started);
        in_flight_.emplace(reruns_.size(), std::move(*started));
      }
      reruns_.push_back(std::move(rerun));
    }
    return {};
  }

  static std::string describe(const RerunInFlight& rerun) {
    if (rerun.job_ids.empty()) return fmt::format("lease L{} of {} nodes", rerun.lease_id, rerun.nodes);
    return fmt::format("job{} {}", rerun.job_ids.size() == 1 ? "" : "s", fmt::join(rerun.job_ids, ", "));
  }

  // Checks every rerun that ended; true when one did.
  bool collect() {
    bool changed = false;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      auto& [index, in_flight] = *it;
      ReproductionReport& rerun = reruns_[index];
      const QualificationModel model = model_of(picks_[index].model, picks_[index].job);
      auto after = follower_.advance(in_flight, model);
      rerun.rerun_job_id = in_flight.first_job_id();
      if (!after || !*after) {
        ++it;
        continue;
      }
      auto original = measured_result(client_, picks_[index].job, model);
      if (!original && for_now(original.error())) {
        ++it;
        continue;
      }
      if (!original) original = not_run(original.error().message);
      rerun.check = check_reproduction(*original, **after, perf_, stats::derive_seed(seed_, rerun.job_id));
      say(fmt::format("{}: rerun of job {} ({} on revision {}): {}: {}", describe(in_flight), rerun.job_id,
                      rerun.model, rerun.revision, to_string(rerun.check->verdict), rerun.check->detail));
      it = in_flight_.erase(it);
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
  std::map<std::size_t, RerunInFlight> in_flight_;  // by index in reruns_, until checked
  RerunFollower follower_;
};

}  // namespace

Result<std::vector<ReproductionReport>> rerun_sample(
    cli::Client& client, const std::vector<ReproductionPick>& picks, const std::string& run_id,
    const stats::PerfGateOptions& perf, std::uint64_t seed, const DriverOptions& options,
    const std::function<void(const std::vector<ReproductionReport>&)>& progress) {
  return SampleRerun(client, picks, run_id, perf, seed, options, progress).run();
}

}  // namespace kiln::qualification::shell
