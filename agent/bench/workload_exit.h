// How the agent judges a workload's end (docs/workloads.md, "Ending a workload"): correctness
// comes from the result document, never from the exit code. A workload that wrote a valid
// kiln.workload-result/1 document is judged from it whatever it exited with (a Python program
// exits 1 on any uncaught exception, so the code cannot carry the verdict); one that exited
// without a valid document crashed, whatever the code. Pure: the exit code and the document in.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "agent/bench/bench.h"

namespace kiln::agent::bench {

enum class WorkloadEnd {
  passed,     // a valid document whose `passed` is true (or a preempted run's)
  incorrect,  // a valid document whose `passed` is false: it ran, its outputs were wrong
  crashed,    // no valid document, and either a non-zero exit or a benchmark was asked
  exited,     // no workload result at all and exit 0: an ordinary program that succeeded
  other       // a document of another schema (the agent's own jobs): the exit code decides
};

struct WorkloadEndJudgement {
  WorkloadEnd end = WorkloadEnd::crashed;
  std::string detail;                   // why, for a crash; the exit code's note for the others
  std::optional<WorkloadResult> result;  // for passed and incorrect
};

// `exit_code`: the program's own; `document`: the result file's text ("" when it wrote none);
// `asked`: the benchmark settings of a benchmark job (which must write a document).
WorkloadEndJudgement judge_workload_end(int exit_code, std::string_view document,
                                        const std::optional<BenchmarkSettings>& asked);

}  // namespace kiln::agent::bench
