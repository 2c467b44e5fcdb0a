// The coordinator's qualification records, typed: changes, bundles, accepted baselines, run
// reports, run requests, claims and tickets over put_record / get_record / list_records (docs/protocol.md §13).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "client/client.h"
#include "records/change.h"
#include "records/run_request.h"
#include "records/ticket_record.h"
#include "records/waiver.h"

namespace kiln::qualification::shell {

Status record_change(cli::Client& client, const Change& change);
// Every recorded change, in the order they were recorded: the history's merge order (changes are
// recorded as they merge). Not sorted by merged_at_ms: a change recorded after others goes after
// them, so the history only grows at its end and a bundle's place in it never moves.
Result<std::vector<Change>> list_changes(cli::Client& client);
// The changes recorded after `after_seq`, in that order; `after_seq` becomes the last one's (and
// stays as it was when the read fails).
Result<std::vector<Change>> list_changes_after(cli::Client& client, std::uint64_t& after_seq);

// The change history for a process that reads it for every run (the qualifier): each read takes
// only the changes recorded since the last one (a page), not the whole history again. Changes
// are immutable and the history only grows at its end, so what was read stays true. Shared by the
// threads of its runs.
class ChangeHistory {
 public:
  Result<std::vector<Change>> read(cli::Client& client);

 private:
  std::mutex mutex_;
  std::uint64_t after_seq_ = 0;
  std::vector<Change> changes_;
};

Status record_bundle(cli::Client& client, const Bundle& bundle);
Result<std::vector<Bundle>> list_bundles(cli::Client& client);
// The `last` bundles recorded latest, oldest of them first; `more` says whether older ones are left.
Result<std::vector<Bundle>> list_latest_bundles(cli::Client& client, std::size_t last, bool& more);
// The bundle of this whole id, read by its key; Errc::not_found when none is recorded.
Result<Bundle> get_bundle(cli::Client& client, const std::string& id);
// A full id, or a unique prefix of at least 6 characters.
Result<Bundle> find_bundle(cli::Client& client, const std::string& id_or_prefix);

struct Baseline {
  std::string revision;
  std::string bundle_id;
  std::string accepted_by_run;  // empty: accepted by hand
  TimeMs accepted_at_ms = 0;
};
Result<std::map<std::string, Baseline>> list_baselines(cli::Client& client);
Status accept_baseline(cli::Client& client, const Baseline& baseline);

// Run reports: qualification runs', or with `kind` stability_run the stability runs' (kiln
// stability), which the risk register reads the same way. A qualification run's report is stored
// as a header and a record per model run (run_records.h) and read back whole by every reader here.
// record_run puts every model run; a writer that records one run again and again (the qualifier,
// every few seconds) keeps a RunRecorder, which puts only the model runs that changed.
Status record_run(cli::Client& client, const std::string& run_id, const nlohmann::json& report,
                  protocol::RecordKind kind = protocol::RecordKind::qualification_run);

class RunRecorder {
 public:
  // The model runs changed since this recorder last put them, then the header (if it or one of
  // them changed), numbered as one write (run_records.h, kWriteMember), so that a reader who finds
  // a header finds its model runs. A model run whose put fails is put again next time.
  Status record(cli::Client& client, const std::string& run_id, const nlohmann::json& report);

 private:
  // The wall clock's milliseconds, or one more than the last write: a writer that takes a run over
  // after another (a restarted qualifier) numbers its writes after the earlier one's, as far as the
  // two hosts' clocks agree.
  std::uint64_t next_write();

  std::mutex mutex_;
  std::uint64_t last_write_ = 0;
  std::map<std::pair<protocol::RecordKind, std::string>, nlohmann::json> written_;  // each record as last put
};

// The whole report of a qualification_run record's document: a header's model runs read a page at
// a time (list_records by key prefix) and put back in as its "models"; a report stored whole (the
// single-record shape of older qualifiers) as it is.
Result<nlohmann::json> whole_run(cli::Client& client, nlohmann::json header);
Result<nlohmann::json> get_run(cli::Client& client, const std::string& run_id,
                               protocol::RecordKind kind = protocol::RecordKind::qualification_run);
Result<std::vector<nlohmann::json>> list_runs(cli::Client& client,
                                              protocol::RecordKind kind = protocol::RecordKind::qualification_run);
// The reports first recorded after `after_seq` (record order); `after_seq` becomes the newest one's.
Result<std::vector<nlohmann::json>> list_runs_after(cli::Client& client, std::uint64_t& after_seq,
                                                    protocol::RecordKind kind = protocol::RecordKind::qualification_run);

// The reports of the runs of bundle `bundle_id`, oldest first. A run is requested once its bundle
// is recorded, and a report's seq is its first write, so only the reports recorded since the
// bundle are read: a promotion reads its bundle's weeks, not the whole history.
Result<std::vector<nlohmann::json>> list_runs_of_bundle(cli::Client& client, const std::string& bundle_id);

// The latest reports (recorded before the one of seq `before_seq`, unless 0), read newest first a
// page at a time until `enough` says so of one (that one is not taken) or none is left; returned
// oldest first, as list_runs orders them. A reader of the latest runs reads those, however many
// are recorded.
Result<std::vector<nlohmann::json>> list_latest_runs(cli::Client& client,
                                                     const std::function<bool(const nlohmann::json&)>& enough,
                                                     protocol::RecordKind kind = protocol::RecordKind::qualification_run,
                                                     std::uint64_t before_seq = 0);

// Asks for a run: the same request again is fine, another under a recorded run id is refused.
Status request_run(cli::Client& client, const RunRequest& request);
struct RecordedRequest {
  std::uint64_t seq = 0;  // the order of requests
  RunRequest request;
  TimeMs requested_at_ms = 0;  // when the coordinator recorded it (a request never changes)
};
// The requests recorded after `after_seq`, in the order they were made.
Result<std::vector<RecordedRequest>> list_run_requests(cli::Client& client, std::uint64_t after_seq);
// Claims the run, or renews this owner's claim; Errc::conflict while another owner's holds.
Status claim_run(cli::Client& client, const RunClaim& claim);

// Asks the qualifier to stop a requested run (kiln run cancel): the first cancel stands.
Status cancel_run(cli::Client& client, const std::string& run_id);
struct RunCancel {
  std::string run_id;
  std::string cancelled_by;  // the key that wrote the cancel
};
// The cancels recorded after `after_seq`, in that order; `after_seq` becomes the last one's.
Result<std::vector<RunCancel>> list_run_cancels(cli::Client& client, std::uint64_t& after_seq);

// Files the ticket, or records its deliveries: the coordinator keeps the first filing of a
// culprit and merges the deliveries (docs/protocol.md §13, ticket records).
Status record_ticket(cli::Client& client, const TicketRecord& record);
// The ticket, or Errc::not_found.
Result<TicketRecord> get_ticket(cli::Client& client, const std::string& id);
// Every ticket in the order they were filed.
Result<std::vector<TicketRecord>> list_tickets(cli::Client& client);
// A person's state change; the ticket as it is now.
Result<TicketRecord> set_ticket_state(cli::Client& client, const protocol::SetTicketState& request);

// Records a waiver (the coordinator stamps the approver and the time) and returns it as stored.
Result<Waiver> record_waiver(cli::Client& client, const Waiver& waiver);
// Every recorded waiver, expired and withdrawn ones included, in the order they were first written.
Result<std::vector<Waiver>> list_waivers(cli::Client& client);
// Withdraws the waiver in force under `key` (waiver_key); the coordinator stamps who withdrew it
// and when, and refuses anyone but an approver of the team that waived it or an admin. Returns it
// as stored.
Result<Waiver> withdraw_waiver(cli::Client& client, const std::string& key);
}  // namespace kiln::qualification::shell
