// A coordinator whose store another coordinator leads waits as a standby (docs/operations.md,
// "A standby coordinator").
#pragma once

#include <atomic>

#include "common/error.h"
#include "common/keys.h"
#include "common/logging.h"
#include "coordinator/server/coordinator_config.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {

// How a coordinator names itself to the store and to standbys' callers: its host.
std::string coordinator_name();

// Returns once this coordinator leads `store` (true), or when `stop` is set first (false). An
// embedded store is led at once. While another coordinator leads, this one listens on its own
// endpoints and answers every message `standby`, naming the leader, so that clients and agents
// that list several coordinators move on to the next at once; it tries to take the leadership
// every `retry_ms`, and takes it as soon as the leader's connection to the store is gone.
Result<bool> wait_until_leading(Store& store, const CoordinatorConfig& config, const KeyPair& keys,
                                spdlog::logger& logger, const std::atomic<bool>& stop, int retry_ms = 200);

}  // namespace kiln::coordinator
