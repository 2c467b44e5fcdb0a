// The agent's side of benchmarks (docs/workloads.md): the settings it passes to a workload as
// KILN_BENCH_* variables, validation of the result document the workload writes (a malformed
// or lying result is an error, never a number), and the report that joins the samples with the
// telemetry the agent read during the job, flagging samples taken while a chip throttled.
// Pure: no files, clocks or processes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/bench/outputs.h"
#include "common/benchmark_settings.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::agent::bench {

// Bounds the result document: warmup_max + repeats samples at most.
using kiln::kMaxBenchmarkIterations;
inline constexpr std::size_t kMaxResultBytes = 256 * 1024;
inline constexpr std::string_view kResultSchema = "kiln.workload-result/1";

// Warmup and repeats are settings per model.
using kiln::BenchmarkSettings;
using kiln::validate;

// KILN_BENCH_WARMUP_MIN, _WARMUP_MAX, _STEADY_WINDOW, _STEADY_TOLERANCE, _REPEATS.
std::map<std::string, std::string> env_for(const BenchmarkSettings& settings);

enum class SamplePhase { warmup, timed };
std::string_view to_string(SamplePhase phase);

struct WorkloadSample {
  std::int64_t index = 0;
  SamplePhase phase = SamplePhase::warmup;
  double start_ms = 0;  // milliseconds since the epoch
  double end_ms = 0;
  double throughput = 0;
};

enum class WorkloadStatus { completed, preempted };
std::string_view to_string(WorkloadStatus status);

// One stack's measurement: a result document's benchmark object, checked.
struct BenchmarkRun {
  std::vector<WorkloadSample> samples;  // warmup first
  std::int64_t warmup_iterations = 0;
  bool steady_reached = false;
  bool warmup_max_reached = false;
};

struct WorkloadResult {
  std::string model;
  std::string dtype;
  std::string throughput_unit;
  WorkloadStatus status = WorkloadStatus::completed;
  bool passed = false;               // the workload's correctness verdict
  bool correctness_checked = false;  // false when it had no golden to compare with
  std::vector<WorkloadSample> samples;
  std::int64_t warmup_iterations = 0;
  bool steady_reached = false;
  bool warmup_max_reached = false;
  // The baseline stack measured on the same chips, interleaved with the candidate above
  // (baseline_benchmark, docs/workloads.md); absent when the workload was given no baseline.
  std::optional<BenchmarkRun> baseline;
  std::vector<DeclaredOutput> outputs;  // the tensors kiln judges itself (agent/bench/outputs.h)
  nlohmann::json document;  // the whole document as the workload wrote it
};

// Checks the document against the contract and the settings the agent asked for: schema,
// types, samples in order and not overlapping, positive finite throughputs, the warmup count
// within [warmup_min, warmup_max], a steady claim that the warmup samples bear out, exactly
// `repeats` timed samples (fewer allowed only when preempted). Errors are Errc::bad_message
// (Errc::too_large over 256 KiB) and say what the workload got wrong. Without `asked` (a job
// that is not a benchmark) the benchmark part is not read and `samples` stays empty.
// A `baseline_benchmark` object, when present, is checked by the same rules against the same
// settings, must use the candidate's throughput unit, and none of its samples may overlap a
// candidate sample (both stacks ran one iteration at a time on the same chips).
Result<WorkloadResult> parse_workload_result(std::string_view text, const std::optional<BenchmarkSettings>& asked);

// A reading the agent took while the job ran, on the same clock as the samples.
struct TelemetrySample {
  TimeMs at_ms;  // milliseconds since the epoch
  std::uint32_t chip;
  bool throttled;
  double temperature_c, power_w, clock_mhz;
};

struct FlaggedSample {
  WorkloadSample sample;
  bool throttled = false;                     // overlaps a throttled reading of one of its chips
  std::vector<std::uint32_t> throttled_chips;
};

struct ChipTelemetrySummary {
  std::uint32_t chip = 0;
  std::size_t readings = 0;
  std::size_t throttled_readings = 0;
  double max_temperature_c = 0;
  double mean_power_w = 0;
  double min_clock_mhz = 0;
  double mean_clock_mhz = 0;
};

// One stack's samples in a report, flagged against the telemetry: the candidate's (the report
// itself) and the baseline's.
struct SampleSetReport {
  std::vector<FlaggedSample> samples;  // every sample, warmup first
  std::vector<double> unflagged_timed_throughputs;
  std::optional<double> median_throughput;  // of the unflagged timed samples
  std::size_t timed_samples = 0;
  std::size_t flagged_timed_samples = 0;
  std::int64_t warmup_iterations = 0;
  bool steady_reached = false;
};
using BaselineReport = SampleSetReport;

struct BenchmarkReport : SampleSetReport {
  std::string model;
  std::string dtype;
  std::string throughput_unit;
  WorkloadStatus status = WorkloadStatus::completed;
  bool correctness_checked = false;
  bool correctness_passed = false;
  std::vector<ChipTelemetrySummary> telemetry;   // one per job chip, in the job's order
  nlohmann::json correctness;                    // the workload's comparison report, as written
  nlohmann::json training;                       // loss curve and eval, null for inference
  std::optional<BaselineReport> baseline;        // when the result has a baseline_benchmark
};

// A reading's state holds from the chip's previous reading to its next one (unbounded before
// the first and after the last), since the chip may have changed just after a reading. A
// sample is flagged when its window [start_ms, end_ms] meets that span of a throttled reading
// of any of `job_chips`; readings of other chips are ignored.
BenchmarkReport make_report(const WorkloadResult& result, const std::vector<std::uint32_t>& job_chips,
                            std::span<const TelemetrySample> telemetry);

// With a baseline, the JSON has a "baseline" object with the same sample and median fields.
nlohmann::json to_json(const BenchmarkReport& report);

}  // namespace kiln::agent::bench
