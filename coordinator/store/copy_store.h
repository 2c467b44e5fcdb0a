// Moving a fleet's state from one store to another (kiln-coordinator migrate-store).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/error.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {

struct StoreCounts {
  std::size_t nodes = 0;
  std::size_t jobs = 0;
  std::size_t records = 0;
  std::size_t leases = 0;
  std::size_t audit_lines = 0;
  bool operator==(const StoreCounts&) const = default;
};

// "N nodes, N jobs, N records, N leases, N audit lines".
std::string to_string(const StoreCounts& counts);

// Copies every node, job, qualification record, lease and audit line (in order, with its time)
// of `from` into `to`, which must hold none yet, then reads `to` back: an error unless it holds
// as many of each as were copied. Writes nothing to `from`. `progress` is told the table being
// copied, for people waiting on a large store.
Result<StoreCounts> copy_store(Store& from, Store& to, const std::function<void(const std::string&)>& progress = {});

}  // namespace kiln::coordinator
