// The job table's clients: submissions (a job, a gang) accepted or refused, and cancels.
#include "coordinator/core/job_table.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/exhaustive.h"
#include "common/protocol/artifacts.h"
#include "common/text/utf8.h"
#include "coordinator/core/core_rules.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/core/lease_lifecycle.h"

namespace kiln::coordinator {

using namespace detail;

JobRecord JobTable::new_job(const Caller& caller, const protocol::SubmitJob& submit, std::uint64_t lease_id,
                            TimeMs now, const LeaseLifecycle& leases) const {
  const DevLease* lease = lease_id != 0 ? leases.find(lease_id) : nullptr;
  JobRecord job;
  job.summary.job_id = next_job_id_;
  job.summary.state = JobState::queued;
  job.summary.priority_class = lease ? lease->summary.priority_class : submit.priority_class;
  job.summary.workload = submit.workload;
  job.summary.args = submit.args;
  job.summary.chips = submit.chips;
  job.summary.hardware_revision = submit.hardware_revision;
  job.requested_node_id = submit.node_id;
  job.summary.max_attempts = submit.max_attempts;
  job.summary.submitted_by = caller.key_name;
  job.timeout_ms = submit.timeout_ms;
  job.seed = submit.seed;
  job.benchmark = submit.benchmark;
  job.summary.bundle_id = submit.bundle_id;
  job.summary.config_hash = submit.config_hash;
  job.artifacts = submit.artifacts;
  job.lease_id = lease_id;
  // Maintenance takes the whole node: nothing else may share its chips while it runs.
  if (protocol::is_maintenance_workload(submit.workload)) {
    job.summary.chips = ctx_.registry.nodes().at(submit.node_id).summary.chips_total;
  }
  job.submitted_at_ms = now;
  if (lease_id != 0) job.summary.detail = fmt::format("runs inside lease L{}", lease_id);
  return job;
}

Result<std::uint64_t> JobTable::accept(const Caller& caller, const protocol::SubmitJob& submit,
                                       std::uint64_t lease_id, TimeMs now, const LeaseLifecycle& leases) {
  if (auto refused = refuse_submit(caller, submit, lease_id, leases)) return tl::unexpected(std::move(*refused));
  JobRecord job = new_job(caller, submit, lease_id, now, leases);
  if (lease_id == 0) {
    if (auto s = submit_to_scheduler(job, now); !s) return tl::unexpected(s.error());
  }
  const std::uint64_t id = next_job_id_++;
  activate(id, job);
  auto& stored = jobs_[id] = std::move(job);
  save(stored);
  ctx_.log(action::Severity::info,
           fmt::format("job {} ({} on {} chips, {}{}) submitted by {}", id, submit.workload, submit.chips,
                       protocol::enum_name(stored.summary.priority_class),
                       lease_id ? fmt::format(", in lease L{}", lease_id) : "", caller.key_name));
  if (submit.workload == protocol::kInstallWorkload) {
    ctx_.audit(caller, "install_requested", "node " + submit.node_id,
               fmt::format("job {}: {} {}", id, submit.workload, fmt::join(submit.args, " ")));
  }
  return id;
}

bool JobTable::submit_gang(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                           const protocol::SubmitGang& gang, TimeMs now, const LeaseLifecycle& leases) {
  if (auto refused = refuse_gang(caller, gang, leases)) {
    ctx_.reply_error(client, m.header.id, refused->code, std::move(refused->message));
    return false;
  }
  // Consecutive ids: rank r is job gang_id + r, so every rank finds the others.
  const std::uint64_t gang_id = next_job_id_;
  const auto size = static_cast<std::uint32_t>(gang.jobs.size());
  protocol::GangAccepted accepted;
  for (std::uint32_t rank = 0; rank < size; ++rank) {
    JobRecord job = new_job(caller, gang.jobs[rank], gang.lease_id, now, leases);
    job.summary.gang_id = gang_id;
    job.summary.gang_rank = rank;
    job.summary.gang_size = size;
    job.summary.detail = fmt::format("rank {} of {} of gang {} inside lease L{}; the ranks start together", rank,
                                     size, gang_id, gang.lease_id);
    const std::uint64_t id = next_job_id_++;
    activate(id, job);
    save(jobs_[id] = std::move(job));
    accepted.job_ids.push_back(id);
  }
  ctx_.sink.push(action::ToClient{client, std::move(accepted), m.header.id});
  ctx_.log(action::Severity::info, fmt::format("gang {} ({} ranks of {}, jobs {} to {}) submitted by {} in lease L{}",
                                               gang_id, size, gang.jobs.front().workload, gang_id,
                                               gang_id + size - 1, caller.key_name, gang.lease_id));
  return true;
}

std::optional<Error> JobTable::refuse_gang(const Caller& caller, const protocol::SubmitGang& gang,
                                           const LeaseLifecycle& leases) {
  const DevLease* lease = leases.find(gang.lease_id);
  if (lease && lease->summary.state != LeaseState::ended && gang.jobs.size() > lease->summary.nodes) {
    return Error{Errc::invalid_argument,
                 lease->summary.nodes == 0
                     ? fmt::format("lease L{} holds chips on one node; a gang runs one rank per node of a lease of "
                                   "whole nodes: lease {} nodes (kiln lease --nodes {})",
                                   gang.lease_id, gang.jobs.size(), gang.jobs.size())
                     : fmt::format("a gang of {} ranks needs {} nodes, lease L{} holds {}; submit at most {} ranks "
                                   "or lease more nodes",
                                   gang.jobs.size(), gang.jobs.size(), gang.lease_id, lease->summary.nodes,
                                   lease->summary.nodes)};
  }
  for (std::size_t rank = 0; rank < gang.jobs.size(); ++rank) {
    if (auto refused = refuse_submit(caller, gang.jobs[rank], gang.lease_id, leases)) {
      refused->message = fmt::format("rank {}: {}", rank, refused->message);
      return refused;
    }
  }
  // The checks above count the queue without the other ranks.
  const std::size_t queued = index_.queued();
  if (queued + gang.jobs.size() > ctx_.knobs.max_queued_jobs) {
    return Error{Errc::unavailable, fmt::format("the queue has room for {} more jobs, the gang has {} ranks; try again "
                                                "later",
                                                ctx_.knobs.max_queued_jobs - queued, gang.jobs.size())};
  }
  if (in_lease(gang.lease_id).size() + gang.jobs.size() > 1024) {
    return Error{Errc::unavailable, fmt::format("lease L{} would have more than 1024 jobs queued or running; wait "
                                                "for some to end",
                                                gang.lease_id)};
  }
  return std::nullopt;
}

std::optional<Error> JobTable::refuse_submit(const Caller& caller, const protocol::SubmitJob& submit,
                                             std::uint64_t lease_id, const LeaseLifecycle& leases) {
  const bool maintenance = protocol::is_maintenance_workload(submit.workload);
  if (lease_id != 0) {
    if (auto refused = refuse_submit_in_lease(caller, submit, lease_id, leases)) return refused;
  } else if (maintenance) {
    if (!client_role_may_run_maintenance(caller.role, submit.workload)) {
      return Error{Errc::unauthorized,
                   fmt::format("role {} may not run {}; diagnostics are for lab, ops and admin, installs for ops "
                               "and admin",
                               protocol::enum_name(caller.role), submit.workload)};
    }
    if (submit.node_id.empty()) {
      return Error{Errc::invalid_argument,
                   fmt::format("{} runs on one node: name it (kiln diag --node ID)", submit.workload)};
    }
  } else if (submit.workload.starts_with("kiln.")) {
    return Error{Errc::invalid_argument,
                 fmt::format("'{}' is not a built-in workload; built-ins are {} and {}", submit.workload,
                             protocol::kDiagWorkload, protocol::kInstallWorkload)};
  } else if (!client_role_may_submit(caller.role, submit.priority_class)) {
    return Error{Errc::unauthorized,
                 fmt::format("role {} may not submit {} jobs; developers and lab engineers submit "
                             "experiments, CI submits presubmit, nightly, bisect and release work",
                             protocol::enum_name(caller.role), protocol::enum_name(submit.priority_class))};
  }
  if (auto artifacts = protocol::check_job_artifacts(submit.args, submit.artifacts); !artifacts) {
    return artifacts.error();
  }
  if (!maintenance && submit.chips > 8) {
    return Error{Errc::invalid_argument,
                 fmt::format("a job runs on one node and may ask for 1 to 8 chips, not {}", submit.chips)};
  }
  if (!submit.node_id.empty() && ctx_.registry.nodes().count(submit.node_id) == 0) {
    return Error{Errc::not_found,
                 fmt::format("node {} is not registered; `kiln nodes` lists the nodes", submit.node_id)};
  }
  if (!maintenance) {
    if (auto never = ctx_.registry.never_runs(submit.workload)) {
      return Error{Errc::invalid_argument, fmt::format("this job could never start: {}", *never)};
    }
  }
  if (!maintenance && lease_id == 0) {
    if (auto never = ctx_.registry.never_placeable(submit.hardware_revision, 0, submit.chips, submit.node_id)) {
      return Error{Errc::invalid_argument, fmt::format("this job could never start: {}", *never)};
    }
  }
  const std::size_t queued = index_.queued();
  if (queued >= ctx_.knobs.max_queued_jobs) {
    return Error{Errc::unavailable, fmt::format("the queue is full ({} jobs waiting); try again later", queued)};
  }
  return std::nullopt;
}

std::optional<Error> JobTable::refuse_submit_in_lease(const Caller& caller, const protocol::SubmitJob& submit,
                                                      std::uint64_t lease_id, const LeaseLifecycle& leases) {
  const DevLease* lease = leases.find(lease_id);
  if (!lease || lease->summary.state == LeaseState::ended) {
    return Error{Errc::not_found,
                 fmt::format("lease L{} is not active; `kiln leases` lists the active leases", lease_id)};
  }
  if (lease->summary.owner != caller.key_name && !privileged(caller.role)) {
    return Error{Errc::unauthorized,
                 fmt::format("lease L{} belongs to {}; run jobs in a lease of your own", lease_id,
                             lease->summary.owner)};
  }
  if (protocol::is_maintenance_workload(submit.workload)) {
    return Error{Errc::invalid_argument,
                 fmt::format("{} takes a whole node and cannot run inside a lease; submit it without --lease",
                             submit.workload)};
  }
  std::size_t largest = 0;
  for (const auto& p : lease->summary.placement) largest = std::max(largest, p.chip_indices.size());
  // A pending lease of whole nodes does not know its node size yet; 8 is the most a job takes.
  const std::size_t per_node = lease->summary.nodes == 0 ? lease->summary.chips : largest > 0 ? largest : 8;
  if (submit.chips > per_node) {
    return Error{Errc::invalid_argument,
                 fmt::format("the job asks for {} chips but lease L{} holds {} chips per node; ask for fewer",
                             submit.chips, lease_id, per_node)};
  }
  if (in_lease(lease_id).size() >= 1024) {
    return Error{Errc::unavailable,
                 fmt::format("lease L{} already has 1024 jobs queued or running; wait for some to end", lease_id)};
  }
  if (!submit.node_id.empty()) {
    return Error{Errc::invalid_argument,
                 "a job inside a lease runs on the lease's chips; drop --node"};
  }
  return std::nullopt;
}

void JobTable::cancel(const std::string& client, const Caller& caller, const protocol::Envelope& m,
                      const protocol::CancelJob& cancel, TimeMs now) {
  auto it = jobs_.find(cancel.job_id);
  if (it == jobs_.end()) {
    ctx_.reply_error(client, m.header.id, Errc::not_found, fmt::format("no job {}", cancel.job_id));
    return;
  }
  JobRecord& job = it->second;
  if (!privileged(caller.role) && job.summary.submitted_by != caller.key_name) {
    ctx_.reply_error(client, m.header.id, Errc::unauthorized,
                     fmt::format("job {} was submitted by {}; only its submitter, ops or admin may cancel it",
                                 cancel.job_id, job.summary.submitted_by));
    return;
  }
  if (protocol::is_terminal(job.summary.state)) {
    ctx_.reply_error(client, m.header.id, Errc::conflict,
                     fmt::format("job {} already ended ({})", cancel.job_id, protocol::enum_name(job.summary.state)));
    return;
  }
  if (job.summary.state == JobState::queued) {
    finish(job, JobState::cancelled, fmt::format("cancelled by {} while queued", caller.key_name), now);
  } else {
    request_cancel(job, fmt::format("cancelled by {}", caller.key_name));
  }
  ctx_.sink.push(action::ToClient{client, protocol::Ok{"cancel requested"}, m.header.id});
}

void JobTable::request_cancel(JobRecord& job, const std::string& why) {
  job.cancel_requested = true;
  job.cancel_reason = text::utf8_head(why, protocol::kMessageText.max_len);
  save(job);
  if (auto peer = ctx_.peer_of(job.summary.node_id)) ctx_.to_agent(*peer, protocol::JobCancel{job.summary.job_id, why});
}

}  // namespace kiln::coordinator
