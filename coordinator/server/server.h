// kiln-coordinator's imperative shell: two CURVE ROUTER sockets (agents, clients), a ZAP
// handler that maps each public key to its role, the store (SQLite or PostgreSQL), and the
// clock. It feeds the pure core and carries out its actions in order.
#pragma once

#include <atomic>
#include <memory>

#include "common/error.h"
#include "coordinator/server/coordinator_config.h"

namespace kiln::coordinator {

class CoordinatorServer {
 public:
  // Opens the store and, when another coordinator leads it, stands by until this one can take
  // over (standby.h). Null when `stop` was set while standing by.
  static Result<std::unique_ptr<CoordinatorServer>> create(CoordinatorConfig config, const std::atomic<bool>& stop);
  virtual ~CoordinatorServer() = default;

  // Serves until `stop` becomes true. Returns an error when the store fails: nothing more
  // can be acknowledged safely, so the process should exit and be restarted.
  virtual Status run(const std::atomic<bool>& stop) = 0;
};

}  // namespace kiln::coordinator
