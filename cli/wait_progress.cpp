#include "cli/wait_progress.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "client/client.h"
#include "cli/duration.h"
#include "cli/text.h"

namespace kiln::cli {

namespace {

std::string expected_text(const protocol::QueueEntry& entry) {
  if (entry.expected_start_ms == 0) return "no start in sight yet";
  return "expected to start " + when_text(entry.expected_start_ms);
}

// Reasons, holders and the expected start of a queued request, joined for one line.
std::string queued_text(const FleetSnapshot& fleet, const protocol::QueueEntry& entry) {
  std::vector<std::string> parts;
  if (!entry.reasons.empty()) parts.push_back(fmt::format("{}", fmt::join(entry.reasons, "; ")));
  if (auto holders = holders_text(fleet, entry.hardware_revision, entry.node_id); !holders.empty()) {
    parts.push_back("held by " + holders);
  }
  parts.push_back(expected_text(entry));
  return fmt::format("{}", fmt::join(parts, "; "));
}

bool on_wanted_node(const FleetSnapshot& fleet, const std::string& node, const std::string& revision,
                    const std::string& node_id) {
  if (!node_id.empty()) return node == node_id;
  if (revision.empty()) return true;
  auto it = fleet.revision_of_node.find(node);
  return it != fleet.revision_of_node.end() && it->second == revision;
}

}  // namespace

std::string holders_text(const FleetSnapshot& fleet, const std::string& revision, const std::string& node_id) {
  struct Holder {
    std::size_t chips = 0;
    std::string text;
  };
  std::vector<Holder> holders;
  for (const auto& lease : fleet.leases) {
    if (lease.state != protocol::LeaseState::granted && lease.state != protocol::LeaseState::preempting) continue;
    std::size_t chips = 0;
    for (const auto& placed : lease.placement) {
      if (on_wanted_node(fleet, placed.node_id, revision, node_id)) chips += placed.chip_indices.size();
    }
    if (chips == 0) continue;
    holders.push_back({chips, fmt::format("lease L{} ({}, {}, {} chips, ends {})", lease.lease_id,
                                          protocol::enum_name(lease.priority_class), lease.owner, chips,
                                          when_text(lease.expires_at_ms))});
  }
  for (const auto& [id, job] : fleet.jobs) {
    if (job.state != protocol::JobState::running || !on_wanted_node(fleet, job.node_id, revision, node_id)) continue;
    holders.push_back({job.chip_indices.size(), fmt::format("job {} ({}, {} on {})", id,
                                                            protocol::enum_name(job.priority_class), job.workload,
                                                            job.node_id)});
  }
  std::stable_sort(holders.begin(), holders.end(), [](const Holder& a, const Holder& b) { return a.chips > b.chips; });
  constexpr std::size_t kShown = 3;
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < holders.size() && i < kShown; ++i) texts.push_back(holders[i].text);
  if (holders.size() > kShown) texts.push_back(fmt::format("{} more", holders.size() - kShown));
  return fmt::format("{}", fmt::join(texts, ", "));
}

std::string job_status_text(const FleetSnapshot& fleet, std::uint64_t job_id) {
  if (auto queued = fleet.queued_jobs.find(job_id); queued != fleet.queued_jobs.end()) {
    return fmt::format("job {} queued: {}", job_id, queued_text(fleet, queued->second));
  }
  auto job = fleet.jobs.find(job_id);
  if (job == fleet.jobs.end()) return fmt::format("job {}", job_id);
  const protocol::JobSummary& j = job->second;
  switch (j.state) {
    case protocol::JobState::queued: return fmt::format("job {} queued", job_id);
    case protocol::JobState::running:
      return fmt::format("job {} running on {} (chips {})", job_id, j.node_id, fmt::join(j.chip_indices, ","));
    default:
      return fmt::format("job {} {}{}", job_id, protocol::enum_name(j.state), j.detail.empty() ? "" : ": " + j.detail);
  }
}

std::string lease_status_text(const FleetSnapshot& fleet, std::uint64_t lease_id) {
  auto queued = fleet.queued_leases.find(lease_id);
  if (queued == fleet.queued_leases.end()) return fmt::format("lease L{}", lease_id);
  const protocol::QueueEntry& entry = queued->second;
  const std::string size = entry.nodes > 0 ? fmt::format("{} whole nodes", entry.nodes)
                                           : fmt::format("{} chips", entry.chips);
  return fmt::format("lease L{} ({}{}) queued: {}", lease_id, size,
                     entry.hardware_revision.empty() ? "" : " of revision " + entry.hardware_revision,
                     queued_text(fleet, entry));
}

std::vector<std::string> run_status_lines(const nlohmann::json& report, const FleetSnapshot& fleet) {
  std::size_t decided = 0;
  std::size_t models = 0;
  if (report.contains("models") && report.at("models").is_array()) {
    for (const auto& model : report.at("models")) {
      ++models;
      if (model.value("verdict", "pending") != "pending") ++decided;
    }
  }
  std::vector<std::string> queued;
  std::vector<std::string> other;
  std::size_t running = 0;
  if (report.contains("jobs_in_flight") && report.at("jobs_in_flight").is_array()) {
    for (const auto& flight : report.at("jobs_in_flight")) {
      const std::uint64_t job_id = flight.value("job_id", std::uint64_t{0});
      const std::uint64_t lease_id = flight.value("lease_id", std::uint64_t{0});
      const std::string what = fmt::format("{} {} on revision {}", flight.value("purpose", std::string()),
                                           flight.value("model", std::string()), flight.value("revision", ""));
      if (job_id == 0) {
        queued.push_back(fmt::format("{} for {}", lease_status_text(fleet, lease_id), what));
        continue;
      }
      const std::string status = job_status_text(fleet, job_id) + " for " + what;
      if (fleet.queued_jobs.count(job_id) > 0) {
        queued.push_back(status);
      } else {
        auto job = fleet.jobs.find(job_id);
        if (job != fleet.jobs.end() && job->second.state == protocol::JobState::running) ++running;
        other.push_back(status);
      }
    }
  }
  std::vector<std::string> lines;
  lines.push_back(fmt::format("run {}: {} of {} model runs decided; {} job{} running, {} waiting",
                              report.value("run_id", std::string()), decided, models, running, running == 1 ? "" : "s",
                              queued.size()));
  lines.insert(lines.end(), queued.begin(), queued.end());
  lines.insert(lines.end(), other.begin(), other.end());
  return lines;
}

FleetSnapshot read_fleet(Client& client, TimeMs now_ms) {
  FleetSnapshot fleet;
  fleet.now_ms = now_ms;
  if (auto jobs = expect_reply<protocol::JobList>(client.request(protocol::ListJobs{1000, true}))) {
    for (auto& job : jobs->jobs) fleet.jobs.emplace(job.job_id, std::move(job));
  }
  if (auto queue = expect_reply<protocol::QueueList>(client.request(protocol::ListQueue{1000}))) {
    for (auto& entry : queue->entries) {
      if (entry.job_id != 0) fleet.queued_jobs.emplace(entry.job_id, entry);
      else fleet.queued_leases.emplace(entry.lease_id, entry);
    }
  }
  if (auto leases = expect_reply<protocol::LeaseList>(client.request(protocol::ListLeases{false}))) {
    fleet.leases = std::move(leases->leases);
  }
  if (auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}))) {
    for (const auto& node : nodes->nodes) fleet.revision_of_node[node.node_id] = node.hardware_revision;
  }
  return fleet;
}

}  // namespace kiln::cli
