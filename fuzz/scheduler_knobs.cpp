// The scheduler's knobs ([scheduler] of coordinator.toml, and the fleet simulator's knob files).
#include "coordinator/scheduler/knobs.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(scheduler_knobs) {
  (void)kiln::scheduler::parse_scheduler_knobs_toml(kiln::fuzz::as_text(data, size));
  return 0;
}
