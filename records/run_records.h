// A qualification run report as the coordinator stores it: a header record (kind
// qualification_run, key = run id) with everything but the model runs, and one model_run record
// per model run (key = "<run id>/<model>@<revision>"), read back in pages by key prefix. A
// report's size then grows with its models only across records, never within one: a night of
// 1,000 model runs fits where one record of at most 768 KiB held about 120 (docs/qualification.md,
// "Run records"). Pure: the shell (records_client.h) puts and lists the records.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace kiln::qualification {

inline constexpr std::string_view kModelRunSchema = "kiln.model-run/1";

struct ModelRunRecord {
  // "<run id>/<model>@<revision>", "#<position>" added for a model run listed again (a soak round),
  // or "<run id>/#<position>" when that is too long.
  std::string key;
  nlohmann::json document;  // {schema, run_id, position, entry}: entry is the report's "models" element
};

struct RunRecords {
  nlohmann::json header;  // the report without "models", with "model_runs": how many there are
  std::vector<ModelRunRecord> models;
};

// The most of a report's "summary" its header keeps. The summary has a line per failing model run
// (about 700 bytes with its bisection and culprit), so a night of 1,000 failures would outgrow a
// header; past this size its header keeps the first lines and says how many more there are (every
// model run's verdict and detail stay in its model_run record).
inline constexpr std::size_t kHeaderSummaryBytes = 64 * 1024;

// The report as records, or nullopt when its run id leaves no room for a model record's key (the
// report is then stored whole, as before: readers take both shapes).
std::optional<RunRecords> split_run(const nlohmann::json& report);

// Whether a qualification_run record is a header whose model runs are stored apart; false for a
// report stored whole (recorded before, or too long a run id), which is read as it is.
bool models_stored_apart(const nlohmann::json& header);

// A write's number, in the header and in each model run a write puts: a writer puts the model
// runs that changed and then the header, all with one number larger than any it put before, so a
// reader who finds a model run of a later write than its header read in the middle of a write.
inline constexpr const char* kWriteMember = "write";

// Whether one of a header's model run documents was put by a later write than the header: the
// header is read again. Records put before writes were numbered count as write 0.
bool written_after(const nlohmann::json& header, const std::vector<nlohmann::json>& documents);

// The key prefix of a run's model records: "<run id>/".
std::string model_run_prefix(const std::string& run_id);

// The report as it was split: the header with the model records' entries as its "models", in
// their positions. A record of another run (a run id that extends this one's past a '/') is
// ignored; of two records at one position (a model set changed between two drives of the run)
// the later in `documents` wins. Errc::bad_message when a position the header counts has no
// record.
Result<nlohmann::json> assemble_run(nlohmann::json header, const std::vector<nlohmann::json>& documents);

}  // namespace kiln::qualification
