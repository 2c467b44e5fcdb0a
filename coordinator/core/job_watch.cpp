#include "coordinator/core/job_watch.h"

#include <fmt/format.h>

namespace kiln::coordinator {

namespace {

bool differs(const protocol::WatchedJob& seen, const protocol::JobSummary& job) {
  return seen.state != job.state || seen.attempt != job.attempt;
}

}  // namespace

void JobWatches::watch(const std::string& client, std::uint64_t corr, const protocol::WatchJobs& watch,
                       const std::map<std::uint64_t, JobRecord>& jobs, TimeMs now) {
  protocol::JobEvents now_events;
  for (const protocol::WatchedJob& seen : watch.jobs) {
    auto it = jobs.find(seen.job_id);
    if (it == jobs.end()) {
      now_events.unknown_job_ids.push_back(seen.job_id);
    } else if (watch.wait_ms == 0 || differs(seen, it->second.summary)) {
      now_events.jobs.push_back(it->second.summary);
    }
  }
  if (watch.wait_ms == 0 || !now_events.jobs.empty() || !now_events.unknown_job_ids.empty()) {
    sink_.to_client(client, std::move(now_events), corr);
    return;
  }
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
  Parked parked{client, corr, {}, now + static_cast<TimeMs>(watch.wait_ms)};
  for (const protocol::WatchedJob& seen : watch.jobs) {
    if (parked.seen.emplace(seen.job_id, seen).second) by_job_.emplace(seen.job_id, number);
  }
  deadlines_.emplace(parked.deadline_ms, number);
  parked_.emplace(number, std::move(parked));
}

void JobWatches::job_saved(const JobRecord& job) {
  const std::uint64_t job_id = job.summary.job_id;
  std::vector<std::uint64_t> news_to;
  for (auto [it, end] = by_job_.equal_range(job_id); it != end; ++it) {
    if (differs(parked_.at(it->second).seen.at(job_id), job.summary)) news_to.push_back(it->second);
  }
  for (std::uint64_t number : news_to) answer(number, protocol::JobEvents{{job.summary}, {}});
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
  for (const auto& [job_id, seen] : parked.seen) {
    for (auto [it, end] = by_job_.equal_range(job_id); it != end; ++it) {
      if (it->second == number) {
        by_job_.erase(it);
        break;
      }
    }
  }
  deadlines_.erase({parked.deadline_ms, number});
  if (auto of_client = parked_by_client_.find(parked.client); --of_client->second == 0) {
    parked_by_client_.erase(of_client);
  }
  sink_.to_client(parked.client, std::move(events), parked.corr);
}

}  // namespace kiln::coordinator
