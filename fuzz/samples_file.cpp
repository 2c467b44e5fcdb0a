// Sample files of `kiln compare`.
#include <cmath>

#include "common/stats/samples_file.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(samples_file) {
  auto samples = kiln::stats::parse_samples(kiln::fuzz::as_text(data, size), "fuzz.txt");
  if (!samples) return 0;
  if (samples->empty()) kiln::fuzz::violated("a samples file was accepted without any sample");
  for (double value : *samples) {
    if (!std::isfinite(value)) kiln::fuzz::violated("a samples file was accepted with a value that is not finite");
  }
  return 0;
}
