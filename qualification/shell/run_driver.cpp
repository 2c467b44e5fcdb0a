#include "qualification/shell/run_driver.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <map>
#include <set>
#include <ostream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/protocol/json.h"
#include "qualification/backends/switchover.h"
#include "qualification/shell/artifact_upload.h"
#include "qualification/shell/gang.h"
#include "client/job_watcher.h"
#include "client/records_client.h"
#include "qualification/shell/reproduction.h"

namespace kiln::qualification::shell {
namespace {

using protocol::JobState;

// How long one watch of a run's jobs waits for a change: a stop or a cancel of the run is
// honoured at least this often.
constexpr std::uint32_t kRunWatchMs = 5000;

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A model run on several whole nodes: a lease of those nodes, then a gang in it, one rank per node.
struct Gang {
  std::uint64_t tag = 0;
  std::uint64_t lease_id = 0;  // 0: jobs taken up from an earlier driver of the run, no lease of ours
  std::string model;
  std::string revision;
  JobPurpose purpose = JobPurpose::measure;
  int nodes = 0;
  protocol::SubmitJob job;             // what each node runs, before rank_job
  std::vector<std::uint64_t> job_ids;  // one per node, once the lease is granted
};

struct InFlight {
  std::uint64_t tag = 0;
  std::uint64_t job_id = 0;  // 0: not accepted yet
  std::string model;
  std::string revision;
  JobPurpose purpose = JobPurpose::measure;
  std::optional<protocol::SubmitJob> measure;  // a measure job: what was submitted, for a rerun
};

class Driver {
 public:
  Driver(cli::Client& client, QualificationRun& run, const ModelSet& set, const std::vector<Change>& history,
         BundleBuilder& builder, TicketSink& tickets, const DriverOptions& options)
      : client_(client), run_(run), set_(set), history_(history), builder_(builder), tickets_(tickets),
        options_(options), watcher_(client, kRunWatchMs, std::chrono::milliseconds(options.poll_interval_ms)) {}

  Result<RunReport> drive() {
    TimeMs last_record = 0;
    find_earlier_jobs();
    refresh_nodes();
    while (true) {
      if (auto ok = carry_out_actions(); !ok) return tl::unexpected(ok.error());
      if (run_.finished()) break;
      if (options_.stop != nullptr && options_.stop->load()) return stop("the qualifier is stopping");
      if (options_.may_continue) {
        if (auto ok = options_.may_continue(); !ok) return stop(ok.error().message);
      }
      if (options_.cancelled_by) {
        if (const std::string who = options_.cancelled_by(); !who.empty()) return cancel_jobs(who);
      }
      wait_for_jobs();
      if (auto ok = collect_results(); !ok) return tl::unexpected(ok.error());
      if (wall_now_ms() - last_record >= options_.record_interval_ms) {
        last_record = wall_now_ms();
        record();
      }
    }
    record();
    return report();
  }

 private:
  void say(const std::string& line) {
    if (options_.progress != nullptr) *options_.progress << line << "\n" << std::flush;
  }

  void record() {
    if (options_.record) options_.record(report());
  }

  // Jobs this run submitted before (a driver that died and was started again): those still
  // queued or running, or ended with a result to read, are taken up by config hash.
  void find_earlier_jobs() {
    auto list = cli::expect_reply<protocol::JobList>(client_.request(protocol::ListJobs{1000, false}));
    if (!list) return;
    for (const auto& job : list->jobs) {
      if (job.config_hash.empty()) continue;
      const bool usable = !protocol::is_terminal(job.state) || ended_with_result(job);
      if (usable) submitted_before_.emplace(job.config_hash, job.job_id);
    }
  }

  // Reads the node list: at the start, and again when the watch says it changed (every turn with
  // a coordinator that does not say).
  void refresh_nodes() {
    auto list = cli::expect_reply<protocol::NodeList>(client_.request(protocol::ListNodes{}));
    if (!list) {
      say("could not list the nodes: " + list.error().message);
      return;
    }
    watcher_.follow_nodes(list->revision);
    std::vector<NodeCandidate> nodes;
    for (const auto& n : list->nodes) {
      const auto backend = backends::declared_backend(n.labels);
      node_backends_[n.node_id] = backend ? std::string(kiln::enum_name(*backend)) : std::string();
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

  // Uploads a job's files once per run (the coordinator keeps them by digest).
  Result<ShippedFiles> ship(const JobRequest& request) {
    auto files = job_files(request, set_, options_);
    if (!files) return tl::unexpected(files.error());
    const auto upload = [&](const std::string& name, const std::filesystem::path& path) -> Result<protocol::ArtifactRef> {
      auto known = uploaded_.find(path.string());
      if (known == uploaded_.end()) {
        auto artifact = upload_artifact(client_, name, path);
        if (!artifact) return artifact;
        known = uploaded_.emplace(path.string(), *artifact).first;
      }
      protocol::ArtifactRef named = known->second;
      named.name = name;
      return named;
    };
    ShippedFiles shipped;
    auto stack = upload("stack.toml", files->stack);
    if (!stack) return tl::unexpected(stack.error());
    shipped.stack = *stack;
    if (!files->baseline_stack.empty()) {
      auto baseline = upload("baseline-stack.toml", files->baseline_stack);
      if (!baseline) return tl::unexpected(baseline.error());
      shipped.baseline_stack = *baseline;
    }
    for (const auto& golden : files->golden) {
      auto artifact = upload(golden.filename().string(), golden);
      if (!artifact) return tl::unexpected(artifact.error());
      shipped.golden.push_back(*artifact);
    }
    return shipped;
  }

  Status carry_out(run_action::StartJob& start) {
    const JobRequest& request = start.request;
    auto job = [&]() -> Result<protocol::SubmitJob> {
      if (options_.artifacts == ArtifactMode::shared_mount) {
        return job_for(request, run_.report().run_id, run_.report().tier, set_, options_);
      }
      auto shipped = ship(request);
      if (!shipped) return tl::unexpected(shipped.error());
      return job_for(request, run_.report().run_id, run_.report().tier, set_, options_, &*shipped);
    }();
    // The coordinator did not take the job's files for now: as for the job itself, no attempt lost.
    if (!job && for_now(job.error())) {
      return fail(job.error().code, "the coordinator did not take the job's files for now: " + job.error().message);
    }
    if (!job) {
      JobResult missing;
      missing.tag = request.tag;
      missing.ran = false;
      missing.detail = job.error().message;
      say(fmt::format("cannot run {}: {}", request.model, job.error().message));
      return run_.on_job_result(std::move(missing), wall_now_ms());
    }
    if (request.nodes > 1) return start_gang(request, *job);
    if (auto earlier = submitted_before_.find(job->config_hash); earlier != submitted_before_.end()) {
      const std::uint64_t job_id = earlier->second;
      submitted_before_.erase(earlier);
      in_flight_[job_id] = in_flight(request, job_id, *job);
      by_tag_[request.tag] = job_id;
      say(fmt::format("job {}: {} {} on revision {}, submitted by this run before: taken up", job_id,
                      to_string(request.purpose), request.model, request.revision));
      return {};
    }
    auto accepted = cli::expect_reply<protocol::JobAccepted>(client_.request(*job));
    if (!accepted) {
      if (for_now(accepted.error())) {
        return fail(accepted.error().code, "the coordinator did not take the job for now: " + accepted.error().message);
      }
      JobResult refused;
      refused.tag = request.tag;
      refused.ran = false;
      refused.detail = "the coordinator refused the job: " + accepted.error().message;
      say(fmt::format("{} refused: {}", request.model, accepted.error().message));
      return run_.on_job_result(std::move(refused), wall_now_ms());
    }
    in_flight_[accepted->job_id] = in_flight(request, accepted->job_id, *job);
    by_tag_[request.tag] = accepted->job_id;
    say(fmt::format("job {}: {} {} on revision {}{}", accepted->job_id, to_string(request.purpose), request.model,
                    request.revision, request.node_id.empty() ? "" : " on " + request.node_id));
    return {};
  }

  // A model larger than one node: its whole nodes are leased at once (all or nothing), then one
  // gang runs in the lease, a rank per node; the result is theirs together.
  Status start_gang(const JobRequest& request, const protocol::SubmitJob& job) {
    Gang gang;
    gang.tag = request.tag;
    gang.model = request.model;
    gang.revision = request.revision;
    gang.purpose = request.purpose;
    gang.nodes = request.nodes;
    gang.job = job;
    gang.job.node_id.clear();
    for (int rank = 0; rank < request.nodes; ++rank) {
      auto earlier = submitted_before_.find(rank_job(gang.job, rank).config_hash);
      if (earlier == submitted_before_.end()) break;
      gang.job_ids.push_back(earlier->second);
    }
    if (gang.job_ids.size() == static_cast<std::size_t>(request.nodes)) {
      for (int rank = 0; rank < request.nodes; ++rank) submitted_before_.erase(rank_job(gang.job, rank).config_hash);
      say(fmt::format("jobs {}: {} on {} nodes, submitted by this run before: taken up",
                      fmt::join(gang.job_ids, ", "), request.model, request.nodes));
      gangs_[request.tag] = std::move(gang);
      return {};
    }
    gang.job_ids.clear();
    auto reply = client_.request(gang_lease(job, request.nodes, request.revision));
    const std::uint64_t lease_id = reply ? lease_id_of(*reply) : 0;
    if (!reply && for_now(reply.error())) {
      return fail(reply.error().code, "the coordinator did not take the lease for now: " + reply.error().message);
    }
    if (lease_id == 0) {
      JobResult refused;
      refused.tag = request.tag;
      refused.ran = false;
      refused.detail = "the coordinator refused a lease of " + std::to_string(request.nodes) +
                       " nodes: " + (reply ? std::string(protocol::type_name(*reply)) : reply.error().message);
      say(fmt::format("{} on {} nodes refused: {}", request.model, request.nodes, refused.detail));
      return run_.on_job_result(std::move(refused), wall_now_ms());
    }
    gang.lease_id = lease_id;
    gangs_[request.tag] = std::move(gang);
    say(fmt::format("lease L{}: {} nodes of revision {} for {} ({})", lease_id, request.nodes, request.revision,
                    request.model, to_string(request.purpose)));
    return {};
  }

  // The leases of the gangs waiting for theirs: as the watch last heard them, or listed when the
  // coordinator is older than watch_jobs (one it does not list has ended).
  std::optional<std::map<std::uint64_t, protocol::LeaseSummary>> waited_leases() {
    if (!watcher_.polling()) return heard_leases_;
    auto listed = cli::expect_reply<protocol::LeaseList>(client_.request(protocol::ListLeases{true}));
    if (!listed) return std::nullopt;
    std::map<std::uint64_t, protocol::LeaseSummary> leases;
    for (const auto& lease : listed->leases) leases.emplace(lease.lease_id, lease);
    for (const auto& [tag, gang] : gangs_) {
      if (gang.job_ids.empty()) leases.emplace(gang.lease_id, cli::ended_lease(gang.lease_id));
    }
    return leases;
  }

  // Gangs whose lease was granted get their jobs; gangs whose jobs all ended give their result.
  Status advance_gangs(const std::map<std::uint64_t, JobState>& states) {
    if (gangs_.empty()) return {};
    const auto leases = waited_leases();
    if (!leases) return {};  // a slow answer: the next turn asks again
    std::vector<std::uint64_t> done;
    for (auto& [tag, gang] : gangs_) {
      const std::uint64_t lease_id = gang.lease_id;
      if (gang.job_ids.empty()) {
        const auto heard = leases->find(lease_id);
        if (heard == leases->end()) continue;  // not heard of yet
        const protocol::LeaseSummary* lease = &heard->second;
        if (lease->state == protocol::LeaseState::ended) {
          JobResult lost;
          lost.tag = gang.tag;
          lost.ran = false;
          lost.detail = fmt::format("lease L{} ended before its jobs ran: {}", lease_id, lease->detail);
          done.push_back(tag);
          if (auto ok = run_.on_job_result(std::move(lost), wall_now_ms()); !ok) say(ok.error().message);
          continue;
        }
        if (lease->state != protocol::LeaseState::granted) continue;
        protocol::SubmitGang ranks{lease_id, {}};
        for (int rank = 0; rank < gang.nodes; ++rank) ranks.jobs.push_back(rank_job(gang.job, rank));
        auto accepted = cli::expect_reply<protocol::GangAccepted>(client_.request(ranks));
        if (!accepted && for_now(accepted.error())) continue;  // asked again next turn
        if (!accepted) {
          JobResult refused;
          refused.tag = gang.tag;
          refused.ran = false;
          refused.detail = fmt::format("the coordinator refused the gang in lease L{}: {}", lease_id,
                                       accepted.error().message);
          say(fmt::format("{} on {} nodes refused: {}", gang.model, gang.nodes, accepted.error().message));
          done.push_back(tag);
          if (auto ok = run_.on_job_result(std::move(refused), wall_now_ms()); !ok) say(ok.error().message);
          continue;
        }
        gang.job_ids = accepted->job_ids;
        stop_following_lease(lease_id);
        say(fmt::format("lease L{}: jobs {} for {}, ranks 0 to {} of one gang", lease_id,
                        fmt::join(gang.job_ids, ", "), gang.model, gang.nodes - 1));
        continue;
      }
      const bool all_ended = std::all_of(gang.job_ids.begin(), gang.job_ids.end(), [&](std::uint64_t id) {
        auto it = states.find(id);
        return it != states.end() && protocol::is_terminal(it->second);
      });
      if (!all_ended) continue;
      std::vector<JobResult> ranks;
      for (std::uint64_t id : gang.job_ids) {
        auto detail = cli::expect_reply<protocol::JobDetail>(client_.request(protocol::GetJob{id}));
        if (!detail) return {};  // asked again next turn
        ranks.push_back(result_of(InFlight{gang.tag, id, gang.model, "", gang.purpose, std::nullopt}, *detail));
      }
      done.push_back(tag);
      JobResult combined = combine_ranks(gang.tag, std::move(ranks));
      const QualificationModel* model = set_.find(gang.model);
      if (combined.ran && gang.purpose == JobPurpose::measure && model != nullptr) {
        measured_[{gang.model, gang.revision}] = MeasuredJob{gang.job_ids.front(), protocol::to_json(gang.job).dump(),
                                                             model->eval_threshold, gang.job_ids};
      }
      if (auto ok = run_.on_job_result(std::move(combined), wall_now_ms()); !ok) say(ok.error().message);
    }
    for (std::uint64_t tag : done) {
      for (std::uint64_t job_id : gangs_.at(tag).job_ids) unfollow(job_id);
      stop_following_lease(gangs_.at(tag).lease_id);
      if (gangs_.at(tag).lease_id != 0) (void)client_.request(protocol::ReleaseLease{gangs_.at(tag).lease_id});
      gangs_.erase(tag);
    }
    return carry_out_actions();
  }


  Status carry_out(run_action::CancelJob& cancel) {
    if (auto gang = gangs_.find(cancel.tag); gang != gangs_.end()) {
      for (std::uint64_t id : gang->second.job_ids) (void)client_.request(protocol::CancelJob{id});
      if (gang->second.lease_id != 0) (void)client_.request(protocol::ReleaseLease{gang->second.lease_id});
      stop_following_lease(gang->second.lease_id);
      say(fmt::format("jobs of {} on {} nodes cancelled, their answer no longer matters", gang->second.model,
                      gang->second.nodes));
      gangs_.erase(gang);
      return {};
    }
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
        // Triage suspects a node for wrong outputs: only the level 3 compute self-test can clear it.
        client_.request(protocol::QuarantineNode{quarantine.node_id, quarantine.reason, "lab",
                                                 protocol::QuarantineCause::wrong_results,
                                                 quarantine.failing_job_id}));
    say(ok ? fmt::format("node {} quarantined: {} ({})", quarantine.node_id, quarantine.reason, ok->detail)
           : fmt::format("could not quarantine node {}: {}", quarantine.node_id, ok.error().message));
    return {};
  }

  Status carry_out(run_action::Log& log) {
    say(log.text);
    return {};
  }

  // Waits for a change of what the run waits for: one watch_jobs over its jobs, the leases its
  // gangs wait for and the node list, which the coordinator holds until one of them changes or
  // kRunWatchMs pass; the node list is read again only when it changed. A coordinator older than
  // watch_jobs is looked at again every poll interval, as before (collect_results lists the jobs).
  void wait_for_jobs() {
    for (const auto& [job_id, flight] : in_flight_) follow(job_id);
    for (const auto& [tag, gang] : gangs_) {
      for (std::uint64_t job_id : gang.job_ids) follow(job_id);
      if (gang.job_ids.empty() && gang.lease_id != 0 && followed_leases_.insert(gang.lease_id).second) {
        watcher_.follow_lease(gang.lease_id);
      }
    }
    if (watcher_.polling()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
      refresh_nodes();
      return;
    }
    auto changed = watcher_.changes();
    if (!changed) {
      say("could not watch the run's jobs: " + changed.error().message);
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_interval_ms));
      return;
    }
    for (const auto& job : changed->jobs) heard_[job.job_id] = job.state;
    for (const auto& lease : changed->leases) heard_leases_[lease.lease_id] = lease;
    if (changed->nodes_changed) refresh_nodes();
  }

  void follow(std::uint64_t job_id) {
    if (followed_.insert(job_id).second) watcher_.follow(job_id);
  }

  void stop_following_lease(std::uint64_t lease_id) {
    followed_leases_.erase(lease_id);
    heard_leases_.erase(lease_id);
    watcher_.forget_lease(lease_id);
  }

  void unfollow(std::uint64_t job_id) {
    followed_.erase(job_id);
    heard_.erase(job_id);
    watcher_.forget(job_id);
  }

  Status collect_results() {
    if (in_flight_.empty() && gangs_.empty()) return {};
    std::map<std::uint64_t, JobState> states = heard_;
    if (watcher_.polling()) {
      auto list = cli::expect_reply<protocol::JobList>(client_.request(protocol::ListJobs{1000, false}));
      if (!list) return {};  // a slow answer: the next turn asks again
      for (const auto& job : list->jobs) states[job.job_id] = job.state;
    }
    if (auto ok = advance_gangs(states); !ok) return ok;
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
      unfollow(job_id);
      JobResult result = result_of(flight, *detail);
      // Triage reruns a wrong result on another node, a free one first: the watch hears of the
      // nodes' records, not of their chips in use, so the list is read afresh for it.
      if (result.ran && !result.correct && watcher_.pushes_leases_and_nodes()) refresh_nodes();
      if (auto ok = run_.on_job_result(std::move(result), wall_now_ms()); !ok) {
        say(fmt::format("job {}: {}", job_id, ok.error().message));
      }
      if (auto ok = carry_out_actions(); !ok) return ok;
    }
    return {};
  }

  JobResult result_of(const InFlight& flight, const protocol::JobDetail& detail) {
    const auto& job = detail.job;
    const QualificationModel* model = set_.find(flight.model);
    JobResult result;
    if (model != nullptr) {
      result = read_job_result(detail, *model);
    } else {
      result.ran = false;
      result.detail = fmt::format("job {} {}: {}", job.job_id, protocol::enum_name(job.state), job.detail);
    }
    result.tag = flight.tag;
    result.job_id = job.job_id;
    // What the node's driver declares now, as the result is read: the backend that made it, kept
    // with it (none when the driver declares nothing).
    if (auto backend = node_backends_.find(job.node_id); backend != node_backends_.end()) {
      result.backend = backend->second;
    }
    if (result.ran && flight.measure) {
      measured_[{flight.model, flight.revision}] =
          MeasuredJob{job.job_id, protocol::to_json(*flight.measure).dump(), model->eval_threshold, {}};
    }
    say(fmt::format("job {}: {} on {} ({}){}", job.job_id, protocol::enum_name(job.state), job.node_id, flight.model,
                    result.ran && !result.correct ? ": INCORRECT " + result.correctness_detail : ""));
    return result;
  }

  static InFlight in_flight(const JobRequest& request, std::uint64_t job_id, const protocol::SubmitJob& job) {
    InFlight flight{request.tag, job_id, request.model, request.revision, request.purpose, std::nullopt};
    if (request.purpose == JobPurpose::measure) flight.measure = job;
    return flight;
  }

  // The run's report with the measure jobs the shell knows of (the run itself knows only tags).
  RunReport report() const {
    RunReport report = run_.report();
    for (ModelReport& m : report.models) {
      if (auto it = measured_.find({m.model, m.revision}); it != measured_.end()) m.measure_job = it->second;
    }
    if (report.finished) return report;
    for (const auto& [job_id, flight] : in_flight_) {
      report.jobs_in_flight.push_back({job_id, 0, flight.model, flight.revision, flight.purpose});
    }
    for (const auto& [tag, gang] : gangs_) {
      if (gang.job_ids.empty()) report.jobs_in_flight.push_back({0, gang.lease_id, gang.model, gang.revision, gang.purpose});
      for (std::uint64_t job_id : gang.job_ids) {
        report.jobs_in_flight.push_back({job_id, gang.lease_id, gang.model, gang.revision, gang.purpose});
      }
    }
    return report;
  }

  // The run was cancelled: none of its jobs' answers matters any more, so their chips are freed.
  Result<RunReport> cancel_jobs(const std::string& who) {
    std::size_t cancelled = 0;
    for (const auto& [job_id, flight] : in_flight_) {
      if (job_id != 0 && client_.request(protocol::CancelJob{job_id})) ++cancelled;
    }
    for (const auto& [tag, gang] : gangs_) {
      for (std::uint64_t id : gang.job_ids) {
        if (client_.request(protocol::CancelJob{id})) ++cancelled;
      }
      if (gang.lease_id != 0) (void)client_.request(protocol::ReleaseLease{gang.lease_id});
    }
    in_flight_.clear();
    gangs_.clear();
    say(fmt::format("cancelled by {}: {} jobs cancelled", who, cancelled));
    record();
    return fail(Errc::conflict, fmt::format("run {} was cancelled by {}; {} of its jobs were cancelled",
                                            run_.report().run_id, who, cancelled));
  }

  // Its jobs keep running: whoever drives the run next takes them up by config hash.
  Result<RunReport> stop(const std::string& why) {
    record();
    return fail(Errc::unavailable, fmt::format("run {} stopped before its verdict ({}); its {} running jobs go on and "
                                               "are taken up when it is driven again",
                                               run_.report().run_id, why, in_flight_.size() + gangs_.size()));
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
  std::map<std::uint64_t, Gang> gangs_;                    // by tag
  // The run's jobs and its gangs' leases followed with watch_jobs, and their states as last heard.
  cli::JobWatcher watcher_;
  std::set<std::uint64_t> followed_;
  std::map<std::uint64_t, JobState> heard_;
  std::set<std::uint64_t> followed_leases_;
  std::map<std::uint64_t, protocol::LeaseSummary> heard_leases_;
  std::map<std::string, protocol::ArtifactRef> uploaded_;  // file path -> its artifact, this run
  std::map<std::pair<std::string, std::string>, MeasuredJob> measured_;  // by (model, revision)
  std::map<std::string, std::string> node_backends_;  // node id -> its driver's declared backend, as last listed
};

}  // namespace

// A job refused for now costs it no attempt: the driver stops and the run resumes from the
// coordinator's store, where a submission whose answer was lost is found by its config hash.
bool for_now(const Error& error) {
  return error.code == Errc::timeout || error.code == Errc::io || error.code == Errc::unavailable;
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

Result<JobFiles> job_files(const JobRequest& request, const ModelSet& set, const DriverOptions& options) {
  const QualificationModel* model = set.find(request.model);
  if (model == nullptr || !model->workload) {
    return fail(Errc::not_found, fmt::format("model {} is not in the qualification set with a workload", request.model));
  }
  JobFiles files;
  files.stack = stack_effects_path(options.bundle_dir, request.bundle_id);
  if (!request.baseline_bundle_id.empty() && request.repeats_per_side > 0) {
    files.baseline_stack = stack_effects_path(options.bundle_dir, request.baseline_bundle_id);
  }
  // The model's golden files in either tensor format (docs/workloads.md, "Outputs kiln judges"):
  // <model>.golden.json, <model>.safetensors and one <model>.<output>.npy per output.
  const std::string prefix = *model->workload + ".";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(options.golden_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool golden = name == prefix + "golden.json" || name == prefix + "safetensors" ||
                        (name.starts_with(prefix) && name.ends_with(".npy"));
    std::error_code kind;
    if (golden && it->is_regular_file(kind)) files.golden.push_back(it->path());
  }
  std::sort(files.golden.begin(), files.golden.end());
  return files;
}

Status check_stack_files(const RunInput& input, const std::filesystem::path& bundle_dir) {
  std::vector<const Bundle*> bundles = {&input.candidate};
  for (const auto& [revision, baseline] : input.baselines) bundles.push_back(&baseline);
  for (const Bundle* bundle : bundles) {
    const auto path = stack_effects_path(bundle_dir, bundle->id);
    std::error_code error;
    if (std::filesystem::is_regular_file(path, error)) continue;
    return fail(Errc::not_found,
                fmt::format("the stack file of bundle {} is missing: {} is not a file, and the run's jobs read it; "
                            "build the bundle into the qualifier's bundle_dir (kiln bundle build --bundle-dir {}), or "
                            "set bundle_dir in qualifier.toml to where it was built",
                            bundle->id.substr(0, 12), path.string(), bundle_dir.string()));
  }
  return {};
}

Result<protocol::SubmitJob> job_for(const JobRequest& request, const std::string& run_id, Tier tier,
                                    const ModelSet& set, const DriverOptions& options, const ShippedFiles* shipped) {
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
  const auto named = [](const std::optional<protocol::ArtifactRef>& artifact) {
    return "{artifact:" + artifact->name + "}";
  };
  job.args = {"--model", *model->workload, "--data-seed", std::to_string(model->data_seed),
              "--golden", shipped ? "{artifacts}" : options.golden_dir.string(),
              "--stack-effects",
              shipped ? named(shipped->stack) : stack_effects_path(options.bundle_dir, request.bundle_id).string()};
  if (!request.baseline_bundle_id.empty() && request.repeats_per_side > 0) {
    job.args.push_back("--baseline-stack-effects");
    job.args.push_back(shipped ? named(shipped->baseline_stack)
                               : stack_effects_path(options.bundle_dir, request.baseline_bundle_id).string());
  }
  if (shipped) {
    job.artifacts.push_back(*shipped->stack);
    if (shipped->baseline_stack) job.artifacts.push_back(*shipped->baseline_stack);
    job.artifacts.insert(job.artifacts.end(), shipped->golden.begin(), shipped->golden.end());
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
  if (!job.artifacts.empty()) {
    std::string digests;
    for (const auto& artifact : job.artifacts) digests += artifact.name + "=" + artifact.sha256 + ";";
    job.config_hash = sha256_hex(job.config_hash + digests);
  }
  return job;
}

Result<RunReport> drive_run(cli::Client& client, QualificationRun& run, const ModelSet& set,
                            const std::vector<Change>& history, BundleBuilder& builder, TicketSink& tickets,
                            const DriverOptions& options) {
  return Driver(client, run, set, history, builder, tickets, options).drive();
}

}  // namespace kiln::qualification::shell
