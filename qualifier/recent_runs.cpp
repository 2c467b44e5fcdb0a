#include "qualifier/recent_runs.h"

#include <nlohmann/json.hpp>

#include "qualification/flake_budget.h"
#include "client/records_client.h"

namespace kiln::qualifier {

namespace qs = kiln::qualification::shell;

Status RecentRuns::refresh(cli::Client& client, const std::function<void(const nlohmann::json&)>& also) {
  std::lock_guard lock(mutex_);
  std::uint64_t seq = after_seq_;
  auto fresh = qs::list_runs_after(client, seq);
  if (!fresh) return tl::unexpected(fresh.error());
  std::set<std::string> read;
  for (const auto& report : *fresh) {
    read.insert(report.value("run_id", ""));
    take_locked(report);
    if (also) also(report);
  }
  for (const std::string& run_id : std::vector<std::string>(unfinished_.begin(), unfinished_.end())) {
    if (read.contains(run_id)) continue;
    auto report = qs::get_run(client, run_id);
    if (!report) {
      if (report.error().code == Errc::not_found) continue;
      return tl::unexpected(report.error());
    }
    take_locked(*report);
    if (also) also(*report);
  }
  after_seq_ = seq;
  return {};
}

void RecentRuns::take(const nlohmann::json& report) {
  std::lock_guard lock(mutex_);
  take_locked(report);
}

void RecentRuns::take_locked(const nlohmann::json& report) {
  report::RunDigest digest = report::digest_of(report);
  const std::string run_id = digest.run_id;
  if (digest.finished) {
    // Counted once: when first read finished (a report read again is an unfinished run's).
    if (unfinished_.erase(run_id) > 0 || !digests_.contains(run_id)) qualification::record_report_runs(flakes_, report);
  } else {
    unfinished_.insert(run_id);
  }
  digests_[run_id] = std::move(digest);
  // Trimmed once the map has doubled, so that taking a report costs O(log n) on average.
  if (++taken_since_trim_ < report::kIndexRuns + digests_.size() / 2) return;
  taken_since_trim_ = 0;
  // A run still going is kept until it finishes, whether or not a page shows it now.
  std::vector<report::RunDigest> finished;
  std::map<std::string, report::RunDigest> kept;
  for (auto& [id, each] : digests_) {
    if (unfinished_.contains(id)) {
      kept.emplace(id, std::move(each));
    } else {
      finished.push_back(std::move(each));
    }
  }
  for (auto& each : report::runs_for_pages(std::move(finished))) kept.emplace(each.run_id, std::move(each));
  digests_ = std::move(kept);
}

void RecentRuns::judged_again(const nlohmann::json& report) {
  std::lock_guard lock(mutex_);
  report::RunDigest digest = report::digest_of(report);
  if (auto held = digests_.find(digest.run_id); held != digests_.end()) held->second = std::move(digest);
}

std::vector<std::string> RecentRuns::unfinished() const {
  std::lock_guard lock(mutex_);
  return {unfinished_.begin(), unfinished_.end()};
}

std::vector<report::RunDigest> RecentRuns::digests() const {
  std::lock_guard lock(mutex_);
  std::vector<report::RunDigest> all;
  for (const auto& [id, digest] : digests_) all.push_back(digest);
  return report::runs_for_pages(std::move(all));
}

qualification::FlakeLedger RecentRuns::flake_ledger() const {
  std::lock_guard lock(mutex_);
  return flakes_;
}

}  // namespace kiln::qualifier
