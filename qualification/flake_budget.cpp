#include "qualification/flake_budget.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

void record_report_runs(FlakeLedger& ledger, const nlohmann::json& report) {
  if (!report.is_object() || !report.value("finished", false)) return;
  const TimeMs at_ms = report.value("finished_at_ms", TimeMs{0});
  const auto models = report.find("models");
  if (models == report.end() || !models->is_array()) return;
  for (const auto& model : *models) {
    if (!model.is_object()) continue;
    const std::string verdict = model.value("verdict", "");
    if (verdict.empty() || verdict == "skipped" || verdict == "error") continue;
    ledger.record_run(model.value("model", ""), model.value("owner_team", ""), at_ms, verdict == "flaky");
  }
}

FlakeLedger flake_ledger_from_reports(std::span<const nlohmann::json> reports, FlakeBudgetOptions options) {
  FlakeLedger ledger(options);
  for (const auto& report : reports) record_report_runs(ledger, report);
  return ledger;
}

std::vector<Ticket> flake_budget_tickets(const FlakeLedger& ledger, TimeMs now_ms) {
  std::vector<Ticket> tickets;
  for (const FlakeBudgetStatus& status : ledger.over_budget(now_ms)) {
    const nlohmann::json evidence = {{"test", status.test},
                                     {"runs", status.runs},
                                     {"flakes", status.flakes},
                                     {"flake_rate", status.flake_rate}};
    tickets.push_back(make_ticket(TicketKind::flake_budget, status.owner_team,
                                  fmt::format("{} is flaky: {} flakes in {} runs ({:.2f}%), over its 1% budget",
                                              status.test, status.flakes, status.runs, 100.0 * status.flake_rate),
                                  "test:" + status.test, std::nullopt, evidence.dump(), now_ms));
  }
  return tickets;
}

}  // namespace kiln::qualification
