// qualifier.toml: where the coordinator is and the qualifier's key, the qualification set and the
// directories its runs use (bundles, goldens, tickets), how long a claim on a run holds and the
// nightly's calendar (docs/operations.md, "The qualifier").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "client/client.h"
#include "qualification/fleet_outliers.h"
#include "qualification/schedule.h"
#include "records/ticket_record.h"

namespace kiln::qualifier {

struct QualifierConfig {
  std::string name;  // in every claim it makes, with its process id and host (default: the host name)
  cli::ClientConfig client;
  std::string model_set;
  // The risk register (risks.toml, docs/risks.md): its gates page their teams when a run fails
  // them, and its approvers' waivers let failures through. Empty: no register, no waiver applies.
  std::string risk_register;
  std::string workload_catalog;  // empty: the sim's workloads
  std::string bundle_dir;
  std::string golden_dir;
  // Jobs name their stack files and goldens by digest (uploaded to the coordinator, fetched by
  // the agents); false: by path, under bundle_dir and golden_dir on a mount every agent shares.
  bool artifacts_by_digest = true;
  std::string builder;  // empty: the sim builder
  std::vector<std::string> builder_args;
  std::string tickets_dir;
  // The unit tier's backends, run before a hardware-path change's smoke (empty: beside the binary).
  std::string sim_driver;
  std::string cpu_driver;
  std::string webhook_config;  // empty: tickets go to the directory only
  // [reports] directory: each run's report as <run>.json and <run>.html, and index.html (empty: none).
  std::string reports_dir;
  qualification::DeliveryPolicy delivery;  // retrying a ticket its sink did not take
  DurationMs claim_ms = 30000;
  DurationMs poll_interval_ms = 1000;
  std::uint32_t max_runs = 4;  // runs driven at once
  // Earlier results each nightly reruns to see whether they reproduce; 0: none.
  std::uint32_t reproducibility_sample = 2;
  // [fleet_check]: after its measurements a nightly runs this many of its models (the cheapest) on
  // every node of each revision and sends a node slower than its peers to diagnostics
  // (fleet_outliers.h has the method and the thresholds); 0: no fleet check.
  std::uint32_t fleet_check_models = 2;
  DurationMs fleet_check_wait_ms = 30 * 60 * 1000;  // then its jobs not ended are cancelled
  qualification::FleetOutlierOptions fleet_outliers;
  // [schedule]: the nightly's calendar. Off without the table, so a qualifier only starts
  // nightlies by itself where it was told to.
  qualification::NightlySchedule schedule{.enabled = false};
  std::vector<std::string> schedule_revisions = {"a", "b"};  // the scheduled bundle's revisions
  std::uint32_t schedule_max_models = 0;  // the nightly's first models of the set; 0: all
  // The schedule's clock is the wall clock plus this: tests and demos put midnight a few seconds
  // ahead instead of waiting for it. 0 in production.
  DurationMs clock_offset_ms = 0;
  // [http] listen: HOST:PORT where /metrics is served (docs/metrics.md); empty: not served.
  std::string http_listen;
};

// Every problem of the file at once (Errc::config, one a line, "file:line:column: what"). Paths
// are relative to the file's directory. Files are not opened: check_config does that.
Result<QualifierConfig> load_qualifier_config(const std::string& path);
// The same from text already read; `path` names the file in errors and anchors relative paths.
Result<QualifierConfig> qualifier_config_from_text(std::string_view text, const std::string& path);

}  // namespace kiln::qualifier
