#include "agent/shell/agent_status.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::agent {
namespace {

using nlohmann::json;

json job_json(const StatusJob& job) {
  return {{"job_id", job.job_id}, {"attempt", job.attempt}, {"workload", job.workload}, {"chips", job.chips},
          {"elapsed_ms", job.elapsed_ms}};
}

template <class T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

// "4.2 s", "3 min 5 s", "2 h 10 min": the precision that matters for an elapsed time.
std::string elapsed_text(DurationMs ms) {
  if (ms < kMinuteMs) return fmt::format("{:.1f} s", static_cast<double>(ms) / kSecondMs);
  if (ms < kHourMs) return fmt::format("{} min {} s", ms / kMinuteMs, ms % kMinuteMs / kSecondMs);
  return fmt::format("{} h {} min", ms / kHourMs, ms % kHourMs / kMinuteMs);
}

std::string ago_text(const json& ms) { return ms.is_null() ? "never" : elapsed_text(ms.get<DurationMs>()) + " ago"; }

}  // namespace

std::string status_to_json(const AgentStatus& status) {
  json chips = json::array();
  for (const StatusChip& chip : status.chips) {
    chips.push_back({{"index", chip.index}, {"healthy", chip.healthy}, {"owner", chip.owner}, {"held_by", chip.held_by}});
  }
  json jobs = json::array();
  for (const StatusJob& job : status.jobs) jobs.push_back(job_json(job));
  json installs = json::array();
  for (const StatusJob& job : status.installs) installs.push_back(job_json(job));
  return json{{"node_id", status.node_id},
              {"coordinator",
               {{"endpoint", status.coordinator_endpoint},
                {"session", status.session},
                {"last_heard_ms_ago", optional_json(status.coordinator_last_heard_ms_ago)}}},
              {"chips", chips},
              {"jobs", jobs},
              {"installs", installs},
              {"local_diagnostics", status.local_diagnostics},
              {"probe",
               {{"running", status.probe.running},
                {"last_started_ms_ago", optional_json(status.probe.last_started_ms_ago)},
                {"last_verdict", status.probe.last_verdict}}}}
      .dump();
}

std::optional<std::string> status_text(const std::string& document) {
  const json doc = json::parse(document, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  try {
    std::string out;
    const json& coordinator = doc.at("coordinator");
    out += fmt::format("node {}\ncoordinator  {} ({}, last heard {})\n", doc.at("node_id").get<std::string>(),
                       coordinator.at("endpoint").get<std::string>(), coordinator.at("session").get<std::string>(),
                       ago_text(coordinator.at("last_heard_ms_ago")));
    out += "chip  owner        held by\n";
    for (const json& chip : doc.at("chips")) {
      out += fmt::format("{:<5} {:<12} {}{}\n", chip.at("index").get<std::uint32_t>(),
                         chip.at("owner").get<std::string>(), chip.at("held_by").get<std::string>(),
                         chip.at("healthy").get<bool>() ? "" : " (unhealthy since start-up: takes no work)");
    }
    for (const char* list : {"jobs", "installs"}) {
      const json& jobs = doc.at(list);
      out += fmt::format("{} running: {}\n", list, jobs.size());
      for (const json& job : jobs) {
        out += fmt::format("  job {} attempt {}  {}  chips {}  running for {}\n", job.at("job_id").get<std::uint64_t>(),
                           job.at("attempt").get<std::uint32_t>(), job.at("workload").get<std::string>(),
                           fmt::join(job.at("chips").get<std::vector<std::uint32_t>>(), ","),
                           elapsed_text(job.at("elapsed_ms").get<DurationMs>()));
      }
    }
    if (doc.at("local_diagnostics").get<bool>()) out += "local diagnostics: running (asked on this host)\n";
    const json& probe = doc.at("probe");
    const std::string verdict = probe.at("last_verdict").get<std::string>();
    out += fmt::format("probe        {}, last started {}{}\n", probe.at("running").get<bool>() ? "running" : "idle",
                       ago_text(probe.at("last_started_ms_ago")), verdict.empty() ? "" : ", last verdict " + verdict);
    return out;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace kiln::agent
