// The scheduler's knobs ([scheduler] of coordinator.toml, and the fleet simulator's knob files).
#include "coordinator/scheduler/knobs.h"
#include "fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)kiln::scheduler::parse_scheduler_knobs_toml(kiln::fuzz::as_text(data, size));
  return 0;
}
