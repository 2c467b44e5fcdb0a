#include "coordinator/core/job_watch.h"

#include <algorithm>

#include <fmt/format.h>

namespace kiln::coordinator {

namespace {

bool differs(const protocol::WatchedJob& seen, const protocol::JobSummary& job) {
  return seen.state != job.state || seen.attempt != job.attempt;
}

// Takes `number` out of an index by id, for each id it was filed under.
template <class Seen>
void unfile(std::multimap<std::uint64_t, std::uint64_t>& index, const Seen& seen, std::uint64_t number) {
  for (const auto& [id, unused] : seen) {
    for (auto [it, end] = index.equal_range(id); it != end; ++it) {
      if (it->second == number) {
        index.erase(it);
        break;
      }
    }
  }
}

}  // namespace

void JobWatches::watch(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch,
                       const std::map<std::uint64_t, JobRecord>& jobs, const LeaseLookup& leases, TimeMs now) {
  if (watch.jobs.empty() && watch.leases.empty() && watch.nodes_revision == 0) {
    sink_.reply_error(client, corr, Errc::invalid_argument,
                      "watch_jobs names no job, no lease and no nodes_revision, so there is nothing to watch; list "
                      "the jobs or leases to follow, or give the revision of the node_list last read");
    return;
  }
  protocol::JobEvents now_events;
  now_events.nodes_revision = nodes_revision_;
  for (const protocol::WatchedJob& seen : watch.jobs) {
    auto it = jobs.find(seen.job_id);
    if (it == jobs.end()) {
      now_events.unknown_job_ids.push_back(seen.job_id);
    } else if (watch.wait_ms == 0 || differs(seen, it->second.summary)) {
      now_events.jobs.push_back(it->second.summary);
    }
  }
  for (const protocol::WatchedLease& seen : watch.leases) {
    const protocol::LeaseSummary* lease = leases(seen.lease_id);
    if (lease == nullptr) {
      now_events.unknown_lease_ids.push_back(seen.lease_id);
    } else if (watch.wait_ms == 0 || seen.state != lease->state) {
      now_events.leases.push_back(*lease);
    }
  }
  const bool nodes_changed = watch.nodes_revision != 0 && watch.nodes_revision != nodes_revision_;
  if (watch.wait_ms == 0 || nodes_changed || !now_events.jobs.empty() || !now_events.unknown_job_ids.empty() ||
      !now_events.leases.empty() || !now_events.unknown_lease_ids.empty()) {
    sink_.to_client(client, std::move(now_events), corr);
    return;
  }
  park(client, corr, watch, now);
}

void JobWatches::park(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch, TimeMs now) {
  std::size_t& of_client = parked_by_client_[client];
  if (of_client >= max_parked_per_client_) {
    sink_.reply_error(client, corr, Errc::unavailable,
                      fmt::format("this connection has {} job watches waiting already (max_job_watches_per_client); "
                                  "watch several jobs in one watch_jobs, or wait for an answer before asking again",
                                  of_client));
    return;
  }
  if (parked_.size() >= max_parked_) {
    if (of_client == 0) parked_by_client_.erase(client);
    sink_.reply_error(client, corr, Errc::unavailable,
                      fmt::format("the coordinator has {} job watches waiting already (max_job_watches); ask again "
                                  "in a few seconds, or raise [knobs] max_job_watches",
                                  parked_.size()));
    return;
  }
  ++of_client;
  const std::uint64_t number = next_number_++;
  Parked parked{client, corr, {}, {}, watch.nodes_revision != 0, now + static_cast<TimeMs>(watch.wait_ms)};
  for (const protocol::WatchedJob& seen : watch.jobs) {
    if (parked.seen.emplace(seen.job_id, seen).second) by_job_.emplace(seen.job_id, number);
  }
  for (const protocol::WatchedLease& seen : watch.leases) {
    if (parked.seen_leases.emplace(seen.lease_id, seen.state).second) by_lease_.emplace(seen.lease_id, number);
  }
  if (parked.follows_nodes) following_nodes_.insert(number);
  deadlines_.emplace(parked.deadline_ms, number);
  parked_.emplace(number, std::move(parked));
}

void JobWatches::job_saved(const JobRecord& job) {
  const std::uint64_t job_id = job.summary.job_id;
  std::vector<std::uint64_t> news_to;
  for (auto [it, end] = by_job_.equal_range(job_id); it != end; ++it) {
    if (differs(parked_.at(it->second).seen.at(job_id), job.summary)) news_to.push_back(it->second);
  }
  for (std::uint64_t number : news_to) {
    protocol::JobEvents events;
    events.jobs.push_back(job.summary);
    answer(number, std::move(events));
  }
}

void JobWatches::lease_saved(const protocol::LeaseSummary& lease) {
  std::vector<std::uint64_t> news_to;
  for (auto [it, end] = by_lease_.equal_range(lease.lease_id); it != end; ++it) {
    if (parked_.at(it->second).seen_leases.at(lease.lease_id) != lease.state) news_to.push_back(it->second);
  }
  for (std::uint64_t number : news_to) {
    protocol::JobEvents events;
    events.leases.push_back(lease);
    answer(number, std::move(events));
  }
}

void JobWatches::node_saved(TimeMs wall_ms) {
  // Past every revision given out, and past the wall clock: a coordinator started later begins
  // above this one's revisions unless nodes were saved faster than one a millisecond.
  nodes_revision_ = std::max(nodes_revision_ + 1, static_cast<std::uint64_t>(std::max<TimeMs>(0, wall_ms)));
  const std::vector<std::uint64_t> news_to(following_nodes_.begin(), following_nodes_.end());
  for (std::uint64_t number : news_to) answer(number, {});
}

void JobWatches::answer_due(TimeMs now) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) answer(deadlines_.begin()->second, {});
}

std::optional<TimeMs> JobWatches::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

void JobWatches::answer(std::uint64_t number, protocol::JobEvents events) {
  auto node = parked_.extract(number);
  const Parked& parked = node.mapped();
  unfile(by_job_, parked.seen, number);
  unfile(by_lease_, parked.seen_leases, number);
  following_nodes_.erase(number);
  deadlines_.erase({parked.deadline_ms, number});
  if (auto of_client = parked_by_client_.find(parked.client); --of_client->second == 0) {
    parked_by_client_.erase(of_client);
  }
  events.nodes_revision = nodes_revision_;
  sink_.to_client(parked.client, std::move(events), parked.corr);
}

}  // namespace kiln::coordinator
