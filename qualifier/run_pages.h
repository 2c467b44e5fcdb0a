// The run pages of the [reports] directory: written by the qualifier each time a run's report is
// recorded, and served on its HTTP port beside /metrics.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/http/server.h"
#include "client/client.h"
#include "qualifier/recent_runs.h"
#include "report/pages.h"

namespace kiln::qualifier {

// A run's pages, written each time its report is recorded. The other runs (the history and the
// index) are brought up to date from the coordinator when the run starts and again before its
// last record, not on every record of its progress. Problems go to `out`: a page not written
// never stops a run. Without a directory it writes nothing.
class RunPages {
 public:
  RunPages(const std::string& directory, RecentRuns& recent, std::ostream& out)
      : directory_(directory), recent_(recent), out_(out) {}

  void read_other_runs(cli::Client& client);
  void write(const nlohmann::json& document);

 private:
  const std::string& directory_;
  RecentRuns& recent_;
  std::ostream& out_;
  std::vector<report::RunDigest> others_;
};

// The report pages of `directory`, as they are written there: `/` is the index, `/NAME` a run's
// page or JSON. Only plain file names of that directory are served (no path can leave it).
http::Response report_file(const std::string& directory, const http::Request& request);

}  // namespace kiln::qualifier
