#include "agent/host/job_dirs.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

namespace kiln::agent {
namespace {

namespace fs = std::filesystem;

bool is_job_dir_name(const std::string& name) { return name.rfind("job-", 0) == 0; }

TimeMs wall_ms_of(fs::file_time_type time) {
  const auto system = std::chrono::file_clock::to_sys(time);
  return std::chrono::duration_cast<std::chrono::milliseconds>(system.time_since_epoch()).count();
}

// Size and newest modification of everything under `dir`; an error when it cannot be walked.
std::optional<JobDir> measure(const fs::path& dir, std::string& problem) {
  std::error_code ec;
  JobDir measured{dir.filename().string(), wall_ms_of(fs::last_write_time(dir, ec)), 0, false};
  if (ec) {
    problem = dir.string() + ": " + ec.message();
    return std::nullopt;
  }
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code entry_ec;
    const auto status = it->symlink_status(entry_ec);
    if (entry_ec) continue;
    if (fs::is_regular_file(status)) measured.bytes += it->file_size(entry_ec);
    if (auto written = it->last_write_time(entry_ec); !entry_ec) {
      measured.modified_wall_ms = std::max(measured.modified_wall_ms, wall_ms_of(written));
    }
  }
  if (ec) {
    problem = dir.string() + ": " + ec.message();
    return std::nullopt;
  }
  return measured;
}

}  // namespace

std::vector<std::string> job_dirs_to_remove(std::vector<JobDir> dirs, const JobDirLimits& limits, TimeMs now_wall_ms) {
  std::stable_sort(dirs.begin(), dirs.end(),
                   [](const JobDir& a, const JobDir& b) { return a.modified_wall_ms < b.modified_wall_ms; });
  std::uint64_t total = 0;
  for (const JobDir& dir : dirs) total += dir.bytes;
  std::vector<std::string> remove;
  for (const JobDir& dir : dirs) {
    if (dir.running) continue;
    const bool too_old = now_wall_ms - dir.modified_wall_ms > limits.max_age_ms;
    if (!too_old && total <= limits.max_total_bytes) continue;
    remove.push_back(dir.name);
    total -= dir.bytes;
  }
  return remove;
}

JobDirCleanup clean_job_dirs(const std::string& work_dir, const std::set<std::string>& running,
                             const JobDirLimits& limits, TimeMs now_wall_ms) {
  JobDirCleanup cleanup;
  std::vector<JobDir> dirs;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(work_dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::error_code type_ec;
    if (!is_job_dir_name(name) || !entry.is_directory(type_ec) || entry.is_symlink(type_ec)) continue;
    std::string problem;
    auto measured = measure(entry.path(), problem);
    if (!measured) {
      cleanup.problems.push_back(problem);
      continue;
    }
    measured->running = running.count(name) > 0;
    if (measured->running) cleanup.running_bytes += measured->bytes;
    dirs.push_back(*measured);
  }
  if (ec) {
    cleanup.problems.push_back(work_dir + ": " + ec.message());
    return cleanup;
  }
  const std::vector<std::string> remove = job_dirs_to_remove(dirs, limits, now_wall_ms);
  for (const JobDir& dir : dirs) {
    if (std::find(remove.begin(), remove.end(), dir.name) == remove.end()) {
      cleanup.kept_bytes += dir.bytes;
      continue;
    }
    std::error_code remove_ec;
    fs::remove_all(fs::path(work_dir) / dir.name, remove_ec);
    if (remove_ec) {
      cleanup.problems.push_back((fs::path(work_dir) / dir.name).string() + ": " + remove_ec.message());
      cleanup.kept_bytes += dir.bytes;
      continue;
    }
    cleanup.removed.push_back(dir.name);
    cleanup.removed_bytes += dir.bytes;
  }
  return cleanup;
}

}  // namespace kiln::agent
