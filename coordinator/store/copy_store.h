// Moving a fleet's state from one store to another (kiln-coordinator migrate-store).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "common/error.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {


// "N nodes, N jobs, N records, N leases, N audit lines".
std::string to_string(const StoreCounts& counts);

// Copies every node, job, qualification record, lease and audit line (in order, with its time)
// of `from` into `to`, which must hold none yet, then counts both: an error unless `to` holds as
// many of each as were copied and `from` held when the copy began. The jobs and the audit log are
// read a page at a time and written in transactions of a thousand, so memory stays flat however
// long the history. Writes nothing to `from`. `progress` is told the table being copied (and
// every 100,000 jobs), for people waiting on a large store.
Result<StoreCounts> copy_store(Store& from, Store& to, const std::function<void(const std::string&)>& progress = {});

}  // namespace kiln::coordinator
