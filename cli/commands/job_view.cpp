#include "cli/commands/job_view.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "client/job_watcher.h"
#include "cli/text.h"
#include "cli/wait_progress.h"

namespace kiln::cli {

namespace {

// How long one watch of the job waits for a change: the progress line of a queued job (what it
// waits for, a few listings) is refreshed this often; a running job costs one request this often
// (under the minute after which /metrics no longer times a request, docs/metrics.md).
constexpr std::uint32_t kQueuedWatchMs = 5000;
constexpr std::uint32_t kRunningWatchMs = 50000;
// How often a coordinator older than watch_jobs is asked for the job.
constexpr auto kPollInterval = std::chrono::milliseconds(250);

void print_output_tail(const std::string& tail) {
  std::cout << "  output (tail)\n";
  std::size_t start = 0;
  while (start < tail.size()) {
    auto end = tail.find('\n', start);
    if (end == std::string::npos) end = tail.size();
    std::cout << "    " << tail.substr(start, end - start) << "\n";
    start = end + 1;
  }
}

void print_job_detail(const protocol::JobDetail& d) {
  const auto& j = d.job;
  std::cout << fmt::format("job {}: {}\n", j.job_id, protocol::enum_name(j.state));
  std::cout << fmt::format("  workload   {} {}\n", j.workload, fmt::join(j.args, " "));
  std::cout << fmt::format("  class      {}, submitted by {}\n", protocol::enum_name(j.priority_class), j.submitted_by);
  std::cout << fmt::format("  placement  {} chips{}{}\n", j.chips, j.node_id.empty() ? "" : " on " + j.node_id,
                           j.chip_indices.empty() ? "" : fmt::format(" [{}]", fmt::join(j.chip_indices, ",")));
  std::cout << fmt::format("  attempt    {} of {}\n", j.attempt, j.max_attempts);
  if (j.gang_size > 0) {
    std::cout << fmt::format("  gang       rank {} of {} (jobs {} to {})\n", j.gang_rank, j.gang_size, j.gang_id,
                             j.gang_id + j.gang_size - 1);
  }
  if (protocol::is_terminal(j.state)) {
    std::cout << fmt::format("  exit code  {} after {}\n", j.exit_code, duration_text(j.duration_ms));
  }
  if (!j.detail.empty()) std::cout << fmt::format("  detail     {}\n", j.detail);
  if (!d.result.empty()) std::cout << "  result\n    " << d.result << "\n";
  if (!d.output_tail.empty()) print_output_tail(d.output_tail);
}

}  // namespace

Result<protocol::JobDetail> wait_for_job(Client& client, std::uint64_t job_id, bool quiet, DurationMs timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  const TimeMs started_ms = wall_now_ms();
  ProgressLine progress = ProgressLine::for_stderr();
  JobWatcher watcher(client, kQueuedWatchMs, kPollInterval);
  watcher.follow(job_id);
  protocol::JobSummary job;
  while (true) {
    if (timeout_ms > 0) {
      const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left_ms.count() <= 0) break;
      watcher.set_wait_ms(static_cast<std::uint32_t>(std::min<std::int64_t>(
          left_ms.count(), job.state == protocol::JobState::queued ? kQueuedWatchMs : kRunningWatchMs)));
    }
    auto changed = watcher.changes();
    if (!changed) return tl::unexpected(changed.error());
    for (const protocol::JobSummary& now : changed->jobs) {
      job = now;
      if (!quiet) {
        progress.done();
        std::cerr << fmt::format("job {}: {}{}\n", job_id, protocol::enum_name(job.state),
                                 job.node_id.empty() ? "" : " on " + job.node_id);
      }
    }
    if (protocol::is_terminal(job.state)) break;
    if (timeout_ms == 0) watcher.set_wait_ms(job.state == protocol::JobState::queued ? kQueuedWatchMs : kRunningWatchMs);
    // What a queued job waits for: its reasons and who holds its chips.
    if (!quiet && job.state == protocol::JobState::queued) {
      const TimeMs now_ms = wall_now_ms();
      progress.show(job_status_text(read_fleet(client, now_ms), job_id), now_ms - started_ms, now_ms);
    }
  }
  return expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{job_id}));
}

int show_job(Client& client, std::uint64_t job_id, bool wait, bool json) {
  auto detail = wait ? wait_for_job(client, job_id, json)
                     : expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{job_id}));
  if (!detail) return report(detail.error());
  if (json) std::cout << protocol::to_json(*detail).dump(2) << "\n";
  else print_job_detail(*detail);
  if (!protocol::is_terminal(detail->job.state)) return kExitOk;
  return detail->job.state == protocol::JobState::succeeded ? kExitOk : kExitFailed;
}

int request_ok(Client& client, protocol::Body request, bool json) {
  auto r = expect_reply<protocol::Ok>(client.request(std::move(request)));
  if (!r) return report(r.error());
  if (json) std::cout << protocol::to_json(*r).dump() << "\n";
  else std::cout << r->detail << "\n";
  return kExitOk;
}

}  // namespace kiln::cli
