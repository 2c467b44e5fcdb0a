#include "sim/fleet/fleet_sim.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <queue>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/stats/rng.h"
#include "coordinator/scheduler/scheduler.h"

namespace kiln::fleet {

namespace sch = kiln::scheduler;

namespace {

enum class Subsystem : std::uint64_t { changes = 1, experiments = 2, failures = 3, bisect = 4, unit_tier = 5 };

// One stream per subsystem (and node), so adding draws to one never shifts another; the
// project's own generator, so a seed gives the same day on every platform.
stats::Rng rng_for(std::uint64_t seed, Subsystem sub, std::uint64_t index = 0) {
  return stats::Rng(stats::derive_seed(seed, static_cast<std::uint64_t>(sub) * 1000003 + index));
}

enum class JobKind { presubmit, nightly, release, experiment, bisect };

struct Job {
  sch::RequestId id = 0;
  JobKind kind = JobKind::experiment;
  sch::RequestClass cls = sch::RequestClass::experiment;
  std::optional<std::string> revision;
  int chips = 1;  // one-node size
  int nodes = 0;  // whole nodes
  DurationMs work_ms = 0;      // actual work
  DurationMs declared_ms = 0;  // what the request says
  DurationMs done_ms = 0;      // kept across preemptions (checkpointed)
  DurationMs checkpoint_ms = 0;
  std::optional<DurationMs> lease_ms;
  std::optional<TimeMs> deadline_ms;
  std::optional<TimeMs> not_before_ms;
  TimeMs submit_ms = 0;
  std::size_t group = 0;  // presubmit: change index
  std::optional<TimeMs> first_start_ms;
  std::optional<sch::LeaseId> lease;
  TimeMs segment_start_ms = 0;
  bool submitted = false;
  bool complete = false;
  int lease_chips = 0;
  std::string lease_revision;
};

enum class EventKind { submit, job_end, checkpoint, node_fail, node_repair };

struct Event {
  TimeMs t = 0;
  std::uint64_t seq = 0;
  EventKind kind = EventKind::submit;
  std::uint64_t a = 0;
  bool operator>(const Event& o) const { return std::tie(t, seq) > std::tie(o.t, o.seq); }
};

LatencySummary summarize(std::vector<double> minutes) {
  LatencySummary s;
  s.count = minutes.size();
  if (minutes.empty()) return s;
  std::sort(minutes.begin(), minutes.end());
  auto pct = [&](double p) {
    // Nearest rank.
    std::size_t rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(minutes.size())));
    return minutes[std::clamp<std::size_t>(rank, 1, minutes.size()) - 1];
  };
  s.p50_minutes = pct(0.50);
  s.p90_minutes = pct(0.90);
  s.p99_minutes = pct(0.99);
  return s;
}

double minutes(DurationMs ms) { return static_cast<double>(ms) / kMinuteMs; }
double hours(double chip_ms) { return chip_ms / kHourMs; }

class FleetRun {
 public:
  FleetRun(const Scenario& scenario, const sch::SchedulerKnobs& knobs, const FleetOptions& options)
      : sc_(scenario), opt_(options), sched_(knobs) {}

  Result<PolicyReport> run() {
    build_pool();
    generate_workload();
    generate_failures();
    std::size_t ticks_at_same_time = 0;
    TimeMs last_tick = -1;
    while (true) {
      std::optional<TimeMs> deadline = sched_.next_deadline();
      bool have_event = !events_.empty();
      if (!have_event && !deadline) break;
      if (deadline && (!have_event || *deadline <= events_.top().t)) {
        now_ = std::max(now_, *deadline);
        if (now_ == last_tick) {
          if (++ticks_at_same_time > 1000) {
            return fail(Errc::internal, fmt::format("the scheduler keeps asking for a tick at {} "
                                                    "without progress; rerun with --seed={}",
                                                    sch::format_clock(now_), opt_.seed));
          }
        } else {
          ticks_at_same_time = 0;
          last_tick = now_;
        }
        sched_.on_tick(now_);
      } else {
        Event e = events_.top();
        events_.pop();
        now_ = e.t;
        if (auto ok = handle(e); !ok) return tl::unexpected(ok.error());
      }
      if (auto ok = drain_actions(); !ok) return tl::unexpected(ok.error());
      if (opt_.check_invariants) {
        if (auto ok = check(); !ok) return tl::unexpected(ok.error());
      }
      if (now_ > opt_.drain_limit_ms) break;
      // Only node failures and repairs left: the day is over.
      if (now_ >= opt_.day_ms && open_jobs_ == 0) break;
    }
    return report();
  }

 private:
  // --- setup ----------------------------------------------------------------------------------

  void build_pool() {
    for (const RevisionSpec& rev : sc_.revisions) {
      for (int i = 0; i < rev.nodes; ++i) {
        sch::NodeInfo node;
        node.id = fmt::format("{}{:02}", rev.name, i + 1);
        node.revision = rev.name;
        for (int c = 0; c < rev.chips_per_node; ++c) {
          // Two NUMA nodes per host, chips paired under switches.
          int numa = c * 2 / std::max(1, rev.chips_per_node);
          node.chips.push_back({c, numa, c / 2});
        }
        node_revision_[node.id] = rev.name;
        node_ids_.push_back(node.id);
        auto ok = sched_.upsert_node(node, 0);
        KILN_ASSERT(ok.has_value(), "the simulated pool is valid");
      }
      chips_by_revision_[rev.name] += rev.nodes * rev.chips_per_node;
    }
  }

  int chips_per_node() const { return sc_.revisions.front().chips_per_node; }

  // Sizes above one node become whole nodes; one-node sizes round up to 1, 2, 4 or 8.
  void set_size(Job& job, int chips) const {
    int per_node = chips_per_node();
    if (chips > per_node) {
      job.nodes = (chips + per_node - 1) / per_node;
      job.chips = 0;
      return;
    }
    int size = 1;
    while (size < chips) size *= 2;
    job.chips = std::min(size, 8);
  }

  sch::RequestId add_job(Job job) {
    job.id = next_id_++;
    sch::RequestId id = job.id;
    push({job.submit_ms, 0, EventKind::submit, id});
    jobs_.emplace(id, std::move(job));
    ++open_jobs_;
    return id;
  }

  void generate_workload() {
    // Presubmit: hardware-path changes, most of them during the workday.
    auto rng = rng_for(opt_.seed, Subsystem::changes);
    const double work_len = static_cast<double>(sc_.workday_end_ms - sc_.workday_start_ms);
    const double off_len = static_cast<double>(opt_.day_ms) - work_len;
    std::vector<TimeMs> arrivals;
    for (int i = 0; i < sc_.hardware_path_changes; ++i) {
      TimeMs t;
      if (rng.uniform01() < sc_.workday_share || off_len <= 0) {
        t = sc_.workday_start_ms + static_cast<TimeMs>(rng.uniform01() * work_len);
      } else {
        TimeMs off = static_cast<TimeMs>(rng.uniform01() * off_len);
        t = off < sc_.workday_start_ms ? off : off + (sc_.workday_end_ms - sc_.workday_start_ms);
      }
      arrivals.push_back(t);
    }
    std::sort(arrivals.begin(), arrivals.end());
    // The unit tier runs first, on CPUs: a rejected change never asks for a chip, the others ask
    // once it has passed.
    auto unit_rng = rng_for(opt_.seed, Subsystem::unit_tier);
    std::erase_if(arrivals, [&](TimeMs) {
      if (unit_rng.uniform01() >= sc_.unit_reject_share) return false;
      ++unit_rejected_;
      return true;
    });
    for (std::size_t c = 0; c < arrivals.size(); ++c) {
      change_arrival_.push_back(arrivals[c]);
      change_remaining_.push_back(0);
      for (const RevisionSpec& rev : sc_.revisions) {
        for (int m = 0; m < sc_.presubmit_models; ++m) {
          Job job;
          job.kind = JobKind::presubmit;
          job.cls = sch::RequestClass::presubmit;
          job.revision = rev.name;
          set_size(job, sc_.presubmit_chips_per_model);
          job.work_ms = job.declared_ms = sc_.presubmit_duration_ms;
          job.submit_ms = arrivals[c] + sc_.unit_duration_ms;
          job.group = c;
          add_job(job);
          ++change_remaining_[c];
        }
      }
    }

    // Nightly: every model on every revision, longest jobs first so the big ones are not last.
    std::vector<JobTier> tiers = sc_.nightly_tiers;
    std::stable_sort(tiers.begin(), tiers.end(), [](const JobTier& a, const JobTier& b) {
      return a.chips * a.duration_ms > b.chips * b.duration_ms;
    });
    for (const RevisionSpec& rev : sc_.revisions) {
      for (const JobTier& tier : tiers) {
        for (int i = 0; i < tier.count; ++i) {
          Job job;
          job.kind = JobKind::nightly;
          job.cls = sch::RequestClass::nightly;
          job.revision = rev.name;
          set_size(job, tier.chips);
          job.work_ms = job.declared_ms = tier.duration_ms;
          job.deadline_ms = sc_.nightly_deadline_ms;
          job.submit_ms = sc_.nightly_start_ms;
          add_job(job);
          ++nightly_remaining_[rev.name];
        }
      }
    }

    // Release: whole nodes per revision, reserved at midnight for its afternoon window.
    if (sc_.release_nodes_per_revision > 0) {
      for (const RevisionSpec& rev : sc_.revisions) {
        Job job;
        job.kind = JobKind::release;
        job.cls = sch::RequestClass::release;
        job.revision = rev.name;
        job.chips = 0;
        job.nodes = sc_.release_nodes_per_revision;
        job.work_ms = job.declared_ms = sc_.release_duration_ms;
        job.not_before_ms = sc_.release_start_ms;
        job.submit_ms = 0;
        release_job_[rev.name] = add_job(job);
      }
    }

    // Developer experiments: Poisson arrivals in the window, log-normal durations; developers
    // ask for whole half-hours, so the declared length is the actual one rounded up.
    auto erng = rng_for(opt_.seed, Subsystem::experiments);
    if (sc_.experiment_arrivals_per_hour > 0) {
      const double arrivals_per_ms = sc_.experiment_arrivals_per_hour / kHourMs;
      const double log_median_minutes = std::log(sc_.experiment_median_minutes);
      double total_share = 0;
      for (const ChipShare& s : sc_.experiment_sizes) total_share += s.share;
      double t = static_cast<double>(sc_.experiment_window_start_ms);
      while (true) {
        t += erng.exponential(arrivals_per_ms);
        if (t >= static_cast<double>(sc_.experiment_window_end_ms)) break;
        double x = erng.uniform(0.0, total_share);
        int chips = sc_.experiment_sizes.back().chips;
        for (const ChipShare& s : sc_.experiment_sizes) {
          if (x < s.share) {
            chips = s.chips;
            break;
          }
          x -= s.share;
        }
        Job job;
        job.kind = JobKind::experiment;
        job.cls = sch::RequestClass::experiment;
        set_size(job, chips);
        job.work_ms = std::max<DurationMs>(kMinuteMs, static_cast<DurationMs>(erng.lognormal(log_median_minutes, sc_.experiment_sigma) * kMinuteMs));
        const DurationMs half_hour = 30 * kMinuteMs;
        job.declared_ms = (job.work_ms + half_hour - 1) / half_hour * half_hour;
        job.lease_ms = job.declared_ms;
        job.checkpoint_ms = sc_.experiment_checkpoint_ms;
        job.submit_ms = static_cast<TimeMs>(t);
        add_job(job);
        ++experiments_;
      }
    }

    // Bisection: the nightly of one revision finds the regression.
    auto brng = rng_for(opt_.seed, Subsystem::bisect);
    bisect_revision_ = sc_.revisions[brng.below(sc_.revisions.size())].name;
    bisect_steps_ = static_cast<int>(std::ceil(std::log2(std::max(2, sc_.bisect_candidate_changes))));
  }

  void generate_failures() {
    if (sc_.node_mtbf_hours <= 0) return;
    for (std::size_t n = 0; n < node_ids_.size(); ++n) {
      auto rng = rng_for(opt_.seed, Subsystem::failures, n);
      const double failures_per_ms = 1.0 / (sc_.node_mtbf_hours * kHourMs);
      double t = 0;
      while (true) {
        t += rng.exponential(failures_per_ms);
        if (t >= static_cast<double>(opt_.drain_limit_ms)) break;
        push({static_cast<TimeMs>(t), 0, EventKind::node_fail, n});
        t += static_cast<double>(sc_.node_repair_ms);
        push({static_cast<TimeMs>(t), 0, EventKind::node_repair, n});
      }
    }
  }

  void push(Event e) {
    e.seq = next_seq_++;
    events_.push(e);
  }

  // --- events ---------------------------------------------------------------------------------

  Status submit(Job& job) {
    sch::Request q;
    q.id = job.id;
    q.cls = job.cls;
    q.chips = job.chips;
    q.nodes = job.nodes;
    q.revision = job.revision;
    q.expected_duration_ms = std::max<DurationMs>(kSecondMs, job.declared_ms - job.done_ms);
    q.deadline_ms = job.deadline_ms;
    q.not_before_ms = job.not_before_ms;
    q.lease_ms = job.lease_ms;
    q.checkpoint_interval_ms = job.checkpoint_ms;
    q.submit_ms = job.submit_ms;
    job.submitted = true;
    auto ok = sched_.submit(q, now_);
    if (!ok) {
      return fail(ok.error().code, fmt::format("submitting request {}: {}; rerun with --seed={}",
                                               job.id, ok.error().message, opt_.seed));
    }
    return {};
  }

  Status handle(const Event& e) {
    switch (e.kind) {
      case EventKind::submit: return submit(jobs_.at(e.a));
      case EventKind::job_end: {
        auto it = lease_job_.find(e.a);
        if (it == lease_job_.end()) return {};  // the lease ended earlier (preempted, lost)
        Job& job = jobs_.at(it->second);
        auto ok = sched_.release(e.a, now_);
        if (!ok) return tl::unexpected(ok.error());
        end_segment(job);
        job.done_ms = job.work_ms;
        return complete(job);
      }
      case EventKind::checkpoint: {
        if (!lease_job_.count(e.a)) return {};
        auto ok = sched_.checkpoint_ack(e.a, now_);
        if (!ok) return tl::unexpected(ok.error());
        return {};
      }
      case EventKind::node_fail: {
        if (now_ < opt_.day_ms) ++node_failures_;
        auto ok = sched_.set_node_state(node_ids_[e.a], sch::NodeState::lost,
                                        "simulated node failure", "ops", now_);
        if (!ok) return tl::unexpected(ok.error());
        return {};
      }
      case EventKind::node_repair: {
        auto ok = sched_.set_node_state(node_ids_[e.a], sch::NodeState::up,
                                        "repaired, diagnostics passed", "lab", now_);
        if (!ok) return tl::unexpected(ok.error());
        return {};
      }
    }
    return {};
  }

  // The lease is gone: account its chip time and free the job for a new lease.
  void end_segment(Job& job) {
    KILN_ASSERT(job.lease.has_value(), "ending a segment of a job without a lease");
    const TimeMs start = job.segment_start_ms;
    const double chip_ms = static_cast<double>(job.lease_chips) * static_cast<double>(now_ - start);
    TimeMs in_day = std::max<TimeMs>(0, std::min(now_, opt_.day_ms) - std::min(start, opt_.day_ms));
    busy_chip_ms_[job.lease_revision] += static_cast<double>(job.lease_chips) * static_cast<double>(in_day);
    if (job.kind == JobKind::experiment) experiment_granted_chip_ms_ += chip_ms;
    lease_job_.erase(*job.lease);
    job.lease.reset();
  }

  TimeMs last_checkpoint(const Job& job) const {
    if (job.checkpoint_ms <= 0) return job.segment_start_ms;
    return job.segment_start_ms +
           (now_ - job.segment_start_ms) / job.checkpoint_ms * job.checkpoint_ms;
  }

  Status complete(Job& job) {
    --open_jobs_;
    job.complete = true;
    switch (job.kind) {
      case JobKind::presubmit:
        if (--change_remaining_[job.group] == 0) {
          presubmit_latency_.push_back(minutes(now_ - change_arrival_[job.group]));
        }
        break;
      case JobKind::nightly:
        if (--nightly_remaining_[*job.revision] == 0) {
          nightly_done_[*job.revision] = now_;
          if (*job.revision == bisect_revision_) {
            bisect_start_ = now_;
            return submit_bisect_step();
          }
        }
        break;
      case JobKind::bisect:
        if (++bisect_done_steps_ < bisect_steps_) return submit_bisect_step();
        bisect_end_ = now_;
        break;
      case JobKind::release:
      case JobKind::experiment:
        break;
    }
    return {};
  }

  Status submit_bisect_step() {
    Job job;
    job.kind = JobKind::bisect;
    job.cls = sch::RequestClass::bisect;
    job.revision = bisect_revision_;
    set_size(job, sc_.bisect_chips_per_step);
    job.work_ms = job.declared_ms = sc_.bisect_step_ms;
    job.submit_ms = now_;
    job.id = next_id_++;
    auto [it, inserted] = jobs_.emplace(job.id, job);
    KILN_ASSERT(inserted, "job ids are unique");
    ++open_jobs_;
    return submit(it->second);
  }

  Status drain_actions() {
    while (auto action = sched_.poll_action()) {
      if (const auto* g = std::get_if<sch::LeaseGranted>(&*action)) {
        Job& job = jobs_.at(g->request);
        KILN_ASSERT(!job.lease, "a job holds one lease at a time");
        job.lease = g->lease;
        job.segment_start_ms = now_;
        job.lease_chips = 0;
        for (const sch::Placement& p : g->placement) job.lease_chips += static_cast<int>(p.chips.size());
        job.lease_revision = node_revision_.at(g->placement.front().node);
        if (!job.first_start_ms) job.first_start_ms = now_;
        lease_job_[g->lease] = job.id;
        push({now_ + (job.work_ms - job.done_ms), 0, EventKind::job_end, g->lease});
      } else if (const auto* n = std::get_if<sch::PreemptNotice>(&*action)) {
        ++notices_;
        Job& job = jobs_.at(n->request);
        // The workload checkpoints on its own period; if one falls inside the grace it
        // acknowledges and lets go there, otherwise the revoke takes what it has.
        if (job.checkpoint_ms > 0) {
          DurationMs since = now_ - job.segment_start_ms;
          TimeMs next = job.segment_start_ms +
                        (since + job.checkpoint_ms - 1) / job.checkpoint_ms * job.checkpoint_ms;
          TimeMs ends = job.segment_start_ms + (job.work_ms - job.done_ms);
          if (next <= n->grace_deadline_ms && next < ends) {
            push({next, 0, EventKind::checkpoint, n->lease});
          }
        }
      } else if (const auto* q = std::get_if<sch::Requeued>(&*action)) {
        Job& job = jobs_.at(q->request);
        TimeMs kept = last_checkpoint(job);
        DurationMs lost = now_ - kept;
        if (lost == 0) ++released_at_checkpoint_;
        lost_preemption_chip_ms_ += static_cast<double>(job.lease_chips) * static_cast<double>(lost);
        job.done_ms += kept - job.segment_start_ms;
        end_segment(job);
      } else if (const auto* l = std::get_if<sch::LeaseLost>(&*action)) {
        Job& job = jobs_.at(l->request);
        TimeMs kept = last_checkpoint(job);
        lost_failure_chip_ms_ += static_cast<double>(job.lease_chips) * static_cast<double>(now_ - kept);
        job.done_ms += kept - job.segment_start_ms;
        end_segment(job);
        // The owner requeues the work, keeping its age.
        if (auto ok = submit(job); !ok) return ok;
      } else if (const auto* x = std::get_if<sch::LeaseExpired>(&*action)) {
        ++expired_;
        Job& job = jobs_.at(x->request);
        end_segment(job);
        if (auto ok = complete(job); !ok) return ok;
      }
    }
    return {};
  }

  Status check() const {
    if (auto ok = sched_.check_invariants(); !ok) {
      return fail(Errc::internal, fmt::format("invariant violated at {}: {}; rerun with --seed={}",
                                              sch::format_clock(now_), ok.error().message,
                                              opt_.seed));
    }
    // Every request the owners submitted is either queued or holds its one lease.
    for (const auto& [id, job] : jobs_) {
      if (!job.submitted || job.complete) continue;
      bool pending = sched_.is_pending(id);
      auto lease = sched_.lease_of(id);
      if (pending == lease.has_value() || (lease && lease != job.lease)) {
        return fail(Errc::internal,
                    fmt::format("request {} is lost between queue and leases at {}; rerun with "
                                "--seed={}",
                                id, sch::format_clock(now_), opt_.seed));
      }
    }
    return {};
  }

  // --- report ---------------------------------------------------------------------------------

  PolicyReport report() const {
    PolicyReport r;
    r.policy = std::string(sch::to_string(sched_.knobs().policy));
    r.presubmit_signal = summarize(presubmit_latency_);
    r.presubmit_changes = change_arrival_.size();
    r.unit_tier_changes = static_cast<std::size_t>(sc_.changes_per_day);
    r.unit_rejected_changes = unit_rejected_;
    r.unit_cpu_hours = static_cast<double>(sc_.changes_per_day) * sc_.unit_backends *
                       static_cast<double>(sc_.unit_duration_ms) / kHourMs;
    // A smoke runs its models on every revision.
    const std::size_t smoke_chips =
        sc_.revisions.size() * static_cast<std::size_t>(sc_.presubmit_models * sc_.presubmit_chips_per_model);
    r.unit_chip_hours_saved = static_cast<double>(unit_rejected_ * smoke_chips) *
                              static_cast<double>(sc_.presubmit_duration_ms) / kHourMs;
    r.nightly_met_deadline = true;
    for (const RevisionSpec& rev : sc_.revisions) {
      RevisionReport rr;
      rr.revision = rev.name;
      auto done = nightly_done_.find(rev.name);
      if (done != nightly_done_.end()) {
        rr.nightly_makespan_minutes = minutes(done->second - sc_.nightly_start_ms);
        rr.nightly_met_deadline = done->second <= sc_.nightly_deadline_ms;
      }
      r.nightly_met_deadline = r.nightly_met_deadline && rr.nightly_met_deadline;
      auto rel = release_job_.find(rev.name);
      if (rel != release_job_.end()) {
        const Job& job = jobs_.at(rel->second);
        if (job.first_start_ms) rr.release_start_delay_minutes = minutes(*job.first_start_ms - sc_.release_start_ms);
      }
      auto busy = busy_chip_ms_.find(rev.name);
      double busy_ms = busy == busy_chip_ms_.end() ? 0 : busy->second;
      rr.utilization = busy_ms / (static_cast<double>(chips_by_revision_.at(rev.name)) *
                                  static_cast<double>(opt_.day_ms));
      r.revisions.push_back(rr);
    }
    r.bisect_revision = bisect_revision_;
    if (bisect_start_ && bisect_end_) r.bisect_minutes = minutes(*bisect_end_ - *bisect_start_);
    std::vector<double> waits;
    for (const auto& [id, job] : jobs_) {
      if (job.kind != JobKind::experiment) continue;
      if (job.first_start_ms) waits.push_back(minutes(*job.first_start_ms - job.submit_ms));
    }
    r.experiments = experiments_;
    r.experiments_started = waits.size();
    r.experiment_wait = summarize(waits);
    r.experiment_chip_hours_granted = hours(experiment_granted_chip_ms_);
    r.experiment_chip_hours_lost_preemption = hours(lost_preemption_chip_ms_);
    r.experiment_lost_share = experiment_granted_chip_ms_ > 0
                                  ? lost_preemption_chip_ms_ / experiment_granted_chip_ms_
                                  : 0;
    r.preemption_notices = notices_;
    r.preemptions_released_at_checkpoint = released_at_checkpoint_;
    r.chip_hours_lost_failures = hours(lost_failure_chip_ms_);
    r.node_failures = node_failures_;
    r.leases_expired = expired_;
    for (const auto& [id, job] : jobs_) {
      if (job.lease || sched_.is_pending(id)) ++r.unfinished_requests;
    }
    r.simulated_hours = static_cast<double>(now_) / kHourMs;
    return r;
  }

  const Scenario& sc_;
  FleetOptions opt_;
  sch::Scheduler sched_;
  TimeMs now_ = 0;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::uint64_t next_seq_ = 0;
  sch::RequestId next_id_ = 1;
  std::map<sch::RequestId, Job> jobs_;
  std::map<sch::LeaseId, sch::RequestId> lease_job_;
  std::vector<std::string> node_ids_;
  std::map<std::string, std::string> node_revision_;
  std::map<std::string, int> chips_by_revision_;

  std::vector<TimeMs> change_arrival_;
  std::vector<int> change_remaining_;
  std::vector<double> presubmit_latency_;
  std::size_t unit_rejected_ = 0;
  std::map<std::string, int> nightly_remaining_;
  std::map<std::string, TimeMs> nightly_done_;
  std::map<std::string, sch::RequestId> release_job_;
  std::string bisect_revision_;
  int bisect_steps_ = 0;
  int bisect_done_steps_ = 0;
  std::optional<TimeMs> bisect_start_;
  std::optional<TimeMs> bisect_end_;
  std::size_t experiments_ = 0;
  std::size_t open_jobs_ = 0;  // submitted or to be submitted, not yet complete

  std::map<std::string, double> busy_chip_ms_;
  double experiment_granted_chip_ms_ = 0;
  double lost_preemption_chip_ms_ = 0;
  double lost_failure_chip_ms_ = 0;
  std::size_t notices_ = 0;
  std::size_t released_at_checkpoint_ = 0;
  std::size_t node_failures_ = 0;
  std::size_t expired_ = 0;
};

}  // namespace

sch::SchedulerKnobs knobs_for(const Scenario& scenario, sch::SchedulerKnobs knobs) {
  knobs.grace_ms = scenario.experiment_grace_ms;
  return knobs;
}

Result<PolicyReport> run_fleet(const Scenario& scenario, const sch::SchedulerKnobs& knobs,
                               const FleetOptions& options) {
  if (scenario.revisions.empty()) {
    return fail(Errc::config, "the scenario has no revisions in [pool]; add at least one");
  }
  FleetRun run(scenario, knobs, options);
  return run.run();
}

}  // namespace kiln::fleet
