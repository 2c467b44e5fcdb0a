// Where the coordinator keeps what it acknowledged. The shell saves every record the core
// asks it to before it sends any later reply, so a restart never loses an accepted job, a
// developer's lease or a stored result.
#pragma once

#include <memory>
#include <string>

#include "common/error.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status save_node(const NodeRecord& node) = 0;
  virtual Status save_job(const JobRecord& job) = 0;
  virtual Status save_record(const protocol::RecordEntry& record) = 0;
  virtual Status save_lease(const LeaseRecord& lease) = 0;
  virtual Result<Snapshot> load() = 0;
};

// SQLite in WAL mode with synchronous=FULL: a save has reached the disk when it returns.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

}  // namespace kiln::coordinator
