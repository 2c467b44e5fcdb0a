// Group commit: the writes of one turn of the coordinator's loop go to the store in one
// transaction, and every message sent after the turn's first write waits until that transaction
// is durable. One fsync then covers a turn's jobs, results and leases instead of one each, and an
// acknowledgement still never precedes the write it depends on (architecture.md, section 3.1).
#pragma once

#include <functional>
#include <vector>

#include "common/error.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {

class GroupCommit {
 public:
  explicit GroupCommit(Store& store) : store_(store) {}

  // Before each write: opens the turn's transaction if none is open.
  Status before_write();
  // A message to send: at once while nothing written waits for its commit, otherwise after it,
  // in the order given.
  void send(std::function<void()> send);
  // The end of a turn: commits what was written, then sends what waited. When the commit fails,
  // nothing that waited is sent and the error is returned: the caller stops the coordinator.
  Status commit();
  bool writing() const { return open_; }

 private:
  Store& store_;
  bool open_ = false;
  std::vector<std::function<void()>> waiting_;
};

}  // namespace kiln::coordinator
