// Flake budgets from the recorded qualification runs: every model run of every finished run
// report is one run of that test, a `flaky` verdict one flake. A test over its budget (under 1%
// of runs by default, triage.h) gets a flake_budget ticket to its owner, once per test.
#pragma once

#include <span>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/time.h"
#include "qualification/ticket.h"
#include "qualification/triage.h"

namespace kiln::qualification {

// Reports in the order they were recorded (to_json(RunReport)); unfinished runs, skipped models
// and models whose jobs could not run do not count.
FlakeLedger flake_ledger_from_reports(std::span<const nlohmann::json> reports, FlakeBudgetOptions options = {});
// One report's runs of its tests into the ledger, as above.
void record_report_runs(FlakeLedger& ledger, const nlohmann::json& report);

// One ticket per test over budget now: kind flake_budget, culprit "test:<name>", to its owner.
std::vector<Ticket> flake_budget_tickets(const FlakeLedger& ledger, TimeMs now_ms);

}  // namespace kiln::qualification
