// What the qualifier's runs read of the other runs, shared by them: the digests the report pages
// show (report::runs_for_pages) and the flake ledger. It takes each report as it is read, and
// says which runs it must read again (those not finished when last read), so that a refresh
// reads what changed since the last (new reports, and the runs that were still going) instead
// of every report recorded: a run costs the coordinator the same however long the history.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "client/client.h"
#include "qualification/triage.h"
#include "report/pages.h"

namespace kiln::qualifier {

class RecentRuns {
 public:
  // Reads the reports first recorded since the last refresh and those of the runs not finished
  // then, through `client` (the caller's connection), and shows each to `also` when given. The
  // first refresh reads every report.
  Status refresh(cli::Client& client, const std::function<void(const nlohmann::json&)>& also = {});

  // A report as read: its digest replaces the run's, and a run seen finished for the first time
  // counts in the flake ledger.
  void take(const nlohmann::json& report);
  // A finished run's report recorded again with a new verdict (a waiver): its digest, when held,
  // says so. Its runs were counted when it was first read finished.
  void judged_again(const nlohmann::json& report);
  // The runs last read unfinished: read again on the next refresh.
  std::vector<std::string> unfinished() const;

  std::vector<report::RunDigest> digests() const;
  qualification::FlakeLedger flake_ledger() const;

 private:
  void take_locked(const nlohmann::json& report);

  mutable std::mutex mutex_;
  std::uint64_t after_seq_ = 0;
  std::map<std::string, report::RunDigest> digests_;  // of the runs the pages show, and the unfinished
  std::set<std::string> unfinished_;
  std::size_t taken_since_trim_ = 0;
  qualification::FlakeLedger flakes_;
};

}  // namespace kiln::qualifier
