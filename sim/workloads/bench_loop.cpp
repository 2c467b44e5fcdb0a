#include "sim/workloads/bench_loop.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::sim::workloads {

namespace {

template <class T>
Status parse_into(const std::function<std::optional<std::string>(const char*)>& getenv, const char* name, T& out,
                  bool& any) {
  const auto text = getenv(name);
  if (!text) return {};
  any = true;
  T value{};
  const char* first = text->data();
  const char* last = first + text->size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last) {
    return fail(Errc::invalid_argument, fmt::format("{}='{}' is not a {}; the agent sets it from the job's benchmark "
                                                    "settings",
                                                    name, *text, std::is_integral_v<T> ? "whole number" : "number"));
  }
  out = value;
  return {};
}

}  // namespace

Result<std::optional<BenchSettings>> bench_settings_from_env(
    const std::function<std::optional<std::string>(const char*)>& getenv) {
  BenchSettings s;
  bool any = false;
  for (auto status : {parse_into(getenv, "KILN_BENCH_WARMUP_MIN", s.warmup_min, any),
                      parse_into(getenv, "KILN_BENCH_WARMUP_MAX", s.warmup_max, any),
                      parse_into(getenv, "KILN_BENCH_STEADY_WINDOW", s.steady_window, any),
                      parse_into(getenv, "KILN_BENCH_STEADY_TOLERANCE", s.steady_tolerance, any),
                      parse_into(getenv, "KILN_BENCH_REPEATS", s.repeats, any)}) {
    if (!status) return tl::unexpected(status.error());
  }
  if (!any) return std::optional<BenchSettings>{};
  if (auto valid = validate(s); !valid) {
    return fail(valid.error().code, "the KILN_BENCH_* variables are invalid: " + valid.error().message);
  }
  return std::optional<BenchSettings>{s};
}

BenchmarkLoop::BenchmarkLoop(BenchSettings settings, PerfNoiseModel noise, double items_per_iteration,
                             std::uint64_t seed)
    : settings_(settings), noise_(noise), items_per_iteration_(items_per_iteration), rng_(seed) {
  KILN_ASSERT(validate(settings_).has_value(), "benchmark settings must be validated before the loop");
  KILN_ASSERT(items_per_iteration_ > 0, "an iteration must do some work");
  warmup_done_ = settings_.warmup_max == 0;
}

bool BenchmarkLoop::done() const { return warmup_done_ && timed_iterations() >= settings_.repeats; }

Sample BenchmarkLoop::next(double start_ms, double steady_throughput) {
  KILN_ASSERT(!done(), "the benchmark is complete");
  KILN_ASSERT(steady_throughput > 0, "a chip offers a positive throughput");
  Sample sample;
  sample.index = static_cast<int>(samples_.size());
  sample.phase = warmup_done_ ? Phase::timed : Phase::warmup;
  sample.throughput = noise_.sample_throughput(steady_throughput, sample.index, rng_);
  sample.start_ms = start_ms;
  sample.end_ms = start_ms + 1000.0 * items_per_iteration_ / sample.throughput;
  samples_.push_back(sample);
  if (sample.phase == Phase::warmup) {
    ++warmup_iterations_;
    warmup_throughputs_.push_back(sample.throughput);
    // Steady: the last window agrees within the tolerance, and its median has not drifted by
    // more than a third of it from the window before (sim/perf: the range test alone passes
    // on the flat tail of the warmup ramp).
    // Validated settings are at most kMaxBenchmarkIterations: they fit an int.
    const SteadyStateOptions steady{static_cast<int>(settings_.steady_window), settings_.steady_tolerance,
                                    settings_.steady_tolerance / 3.0, static_cast<int>(settings_.warmup_max)};
    if (warmup_iterations_ >= settings_.warmup_min && warmup_is_steady(warmup_throughputs_, steady)) {
      steady_reached_ = true;
      warmup_done_ = true;
    } else if (warmup_iterations_ >= settings_.warmup_max) {
      warmup_done_ = true;
    }
  }
  return sample;
}

std::optional<Stack> next_in_comparison(const BenchmarkLoop& candidate, const BenchmarkLoop& baseline) {
  if (candidate.warming_up()) return Stack::candidate;
  if (baseline.warming_up()) return Stack::baseline;
  if (candidate.done() && baseline.done()) return std::nullopt;
  if (candidate.done()) return Stack::baseline;
  if (baseline.done()) return Stack::candidate;
  const int slot = candidate.timed_iterations() + baseline.timed_iterations();
  const bool baseline_first = (slot / 2) % 2 == 0;
  const bool first_of_pair = slot % 2 == 0;
  return baseline_first == first_of_pair ? Stack::baseline : Stack::candidate;
}

nlohmann::json to_json(const BenchSettings& s) {
  return {{"warmup_min", s.warmup_min},
          {"warmup_max", s.warmup_max},
          {"steady_window", s.steady_window},
          {"steady_tolerance", s.steady_tolerance},
          {"repeats", s.repeats}};
}

nlohmann::json benchmark_to_json(const BenchmarkLoop& loop, const std::string& throughput_unit) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& s : loop.samples()) {
    samples.push_back({{"index", s.index},
                       {"phase", s.phase == Phase::warmup ? "warmup" : "timed"},
                       {"start_ms", s.start_ms},
                       {"end_ms", s.end_ms},
                       {"throughput", s.throughput}});
  }
  return {{"settings", to_json(loop.settings())},
          {"throughput_unit", throughput_unit},
          {"warmup",
           {{"iterations", loop.warmup_iterations()},
            {"steady_reached", loop.steady_reached()},
            {"max_reached", loop.warmup_max_reached()}}},
          {"timed_iterations", loop.timed_iterations()},
          {"samples", samples}};
}

}  // namespace kiln::sim::workloads
