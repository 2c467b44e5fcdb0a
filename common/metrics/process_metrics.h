// The process's own figures, under the names Prometheus's client libraries give them
// (process_cpu_seconds_total, process_open_fds, process_max_fds, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_start_time_seconds), read from /proc/self when a page is
// asked for. Not pure, unlike the exposition: these are the kernel's numbers, and they need
// nothing of a process's loop, so the HTTP thread reads them.
#pragma once

#include <string>

namespace kiln::metrics {

// The families in the text exposition format, to append to a page. A figure /proc does not give
// is left out (its family with it), so a page never shows a made-up value.
std::string process_metrics_text();

}  // namespace kiln::metrics
