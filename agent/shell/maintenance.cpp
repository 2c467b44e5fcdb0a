#include "agent/shell/maintenance.h"

#include <fstream>
#include <ostream>

#include <fmt/format.h>

#include "agent/health/diagnostics.h"
#include "common/protocol/json.h"

namespace kiln::agent {

protocol::HealthReport to_health_report(const std::vector<kiln::health::CheckResult>& results) {
  auto status_of = [](kiln::health::CheckStatus s) {
    switch (s) {
      case kiln::health::CheckStatus::pass: return protocol::HealthStatus::pass;
      case kiln::health::CheckStatus::warn: return protocol::HealthStatus::warn;
      case kiln::health::CheckStatus::fail: return protocol::HealthStatus::fail;
      case kiln::health::CheckStatus::skip: return protocol::HealthStatus::skip;
    }
    return protocol::HealthStatus::unknown;
  };
  auto clip = [](const std::string& text, std::size_t limit) { return text.substr(0, limit); };
  protocol::HealthReport report;
  report.verdict = status_of(kiln::health::verdict(results));
  for (const auto& r : results) {
    if (report.checks.size() >= 512) break;
    report.checks.push_back(protocol::HealthCheck{clip(r.check, 64), r.chip ? static_cast<std::int32_t>(*r.chip) : -1,
                                                  status_of(r.status), clip(r.reason_code, 64), clip(r.category, 32),
                                                  clip(r.message, protocol::kMessageText.max_len),
                                                  clip(r.recommended_action, protocol::kMessageText.max_len)});
  }
  return report;
}

int run_probe_command(const AgentConfig& config, const std::set<std::uint32_t>& unprobed_chips, bool json,
                      std::ostream& out, std::ostream& err) {
  auto options = health::default_diag_options(config);
  if (!options) {
    err << "kiln-agent probe: " << options.error().message << "\n";
    return 2;
  }
  options->unprobed_chips = unprobed_chips;
  auto results = health::run_probes(config, *options);
  if (!results) {
    err << "kiln-agent probe: " << results.error().message << "\n";
    return 2;
  }
  const auto report = to_health_report(*results);
  if (json) {
    out << protocol::to_json(report).dump() << "\n";
  } else {
    out << fmt::format("probe: {} ({})\n", protocol::enum_name(report.verdict), kiln::health::summarize(*results));
    for (const auto& c : report.checks) {
      if (c.status == protocol::HealthStatus::pass) continue;
      out << fmt::format("  {:<5} {:<12} {} {}: {}{}\n", protocol::enum_name(c.status), c.check,
                         c.chip >= 0 ? fmt::format("chip {}", c.chip) : "node", c.reason_code, c.message,
                         c.recommended_action.empty() ? "" : " -> " + c.recommended_action);
    }
  }
  return report.verdict == protocol::HealthStatus::fail ? 1 : 0;
}

bool write_result_file(const std::string& path, const std::string& document, std::ostream& err) {
  std::ofstream file(path, std::ios::trunc);
  file << document << "\n";
  if (!file) {
    err << "cannot write the result document to " << path << "\n";
    return false;
  }
  return true;
}

}  // namespace kiln::agent
