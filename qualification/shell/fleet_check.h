// The nightly's fleet check: a few of the night's models measured again on every node of their
// revision, the same bundles and seed pinned to each node in turn, so that each node's level can be
// set against its peers' (fleet_outliers.h). A node the numbers call slow is quarantined for the
// lab with the evidence as its reason (it takes no new work until diagnostics pass, docs/health.md)
// and the lab gets a ticket. What is measured and judged is pure (fleet_check_picks,
// find_slow_nodes); this submits, waits, reads and acts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "client/client.h"
#include "qualification/fleet_outliers.h"
#include "qualification/shell/run_driver.h"
#include "qualification/ticket.h"

namespace kiln::qualification::shell {

struct FleetCheckSettings {
  std::uint32_t models_per_revision = 2;  // 0: no fleet check
  FleetOutlierOptions outliers;
  // How long the check waits for its jobs: one still queued or running then (its node held by a
  // long lease) is cancelled, and its node has fewer samples.
  DurationMs wait_ms = 30 * 60 * 1000;
  std::string lab_team = "lab";  // who the slow node's ticket goes to
};

struct FleetCheckReport {
  std::vector<std::string> models;  // "model on revision R" measured on every node
  std::vector<std::uint64_t> job_ids;
  std::size_t jobs_not_run = 0;     // lost, failed or refused: their node has fewer samples
  FleetSpeedFindings findings;
  std::vector<Ticket> tickets;       // to the lab, one per slow node
  std::vector<std::string> actions;  // "node n03 quarantined for the lab (diagnostics), ticket kiln-..."
  // Revisions with fewer nodes up than a comparison needs: nothing measured there.
  std::vector<std::string> not_checked;
};

// Measures the picks of `report` (fleet_check_picks) on every node of their revision that is up
// (none on a revision with fewer than min_nodes nodes up: they could not be compared), judges them, and quarantines and tickets each slow one. Jobs submitted before for this run
// (a qualifier restarted mid-check) are taken up by config hash. Stops early, the jobs running on,
// when options.stop is set or options.may_continue fails.
Result<FleetCheckReport> check_fleet_speed(cli::Client& client, const RunReport& report, const ModelSet& set,
                                           const FleetCheckSettings& settings, const DriverOptions& options,
                                           TicketSink& sink, TimeMs now_ms);

// Adds the check to a run report document (kiln.qualification-run/1): its "fleet_check" object,
// its tickets to "tickets", and its lines at the end of "summary" (what `kiln run ID` prints).
void add_fleet_check(nlohmann::json& document, const FleetCheckReport& check);

}  // namespace kiln::qualification::shell
