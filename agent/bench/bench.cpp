#include "agent/bench/bench.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln::agent::bench {

namespace {

// Sample times are fractional milliseconds written as JSON numbers; allow for their printing.
constexpr double kTimeSlackMs = 1e-3;
// A steady claim is checked against the tolerance with room for the workload's rounding.
constexpr double kSteadySlack = 1e-9;

tl::unexpected<Error> lie(const std::string& what) {
  return fail(Errc::bad_message, fmt::format("the workload's result document {}; fix the workload to follow "
                                             "docs/workloads.md",
                                             what));
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

// Reads a field of the expected JSON type or says which one is wrong.
template <class T>
Result<T> field(const nlohmann::json& object, const char* name, const std::string& where) {
  if (!object.is_object() || !object.contains(name)) return lie(fmt::format("has no '{}' in {}", name, where));
  const auto& value = object.at(name);
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) return lie(fmt::format("has '{}' in {} that is not true or false", name, where));
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) return lie(fmt::format("has '{}' in {} that is not a string", name, where));
  } else if constexpr (std::is_integral_v<T>) {
    if (!value.is_number_integer()) return lie(fmt::format("has '{}' in {} that is not a whole number", name, where));
  } else {
    if (!value.is_number() || !std::isfinite(value.get<double>())) {
      return lie(fmt::format("has '{}' in {} that is not a finite number", name, where));
    }
  }
  return value.get<T>();
}

#define KILN_BENCH_TRY(var, expr)                     \
  auto var##_result = (expr);                          \
  if (!var##_result) return tl::unexpected(var##_result.error()); \
  auto var = *var##_result

Status check_settings_echo(const nlohmann::json& settings, const BenchmarkSettings& asked) {
  KILN_BENCH_TRY(warmup_min, field<std::int64_t>(settings, "warmup_min", "benchmark.settings"));
  KILN_BENCH_TRY(warmup_max, field<std::int64_t>(settings, "warmup_max", "benchmark.settings"));
  KILN_BENCH_TRY(window, field<std::int64_t>(settings, "steady_window", "benchmark.settings"));
  KILN_BENCH_TRY(tolerance, field<double>(settings, "steady_tolerance", "benchmark.settings"));
  KILN_BENCH_TRY(repeats, field<std::int64_t>(settings, "repeats", "benchmark.settings"));
  if (warmup_min != asked.warmup_min || warmup_max != asked.warmup_max || window != asked.steady_window ||
      std::abs(tolerance - asked.steady_tolerance) > 1e-12 || repeats != asked.repeats) {
    return lie(fmt::format("reports settings (warmup {}..{}, window {}, tolerance {}, repeats {}) other than the agent "
                           "passed (warmup {}..{}, window {}, tolerance {}, repeats {})",
                           warmup_min, warmup_max, window, tolerance, repeats, asked.warmup_min, asked.warmup_max,
                           asked.steady_window, asked.steady_tolerance, asked.repeats));
  }
  return {};
}

Result<std::vector<WorkloadSample>> parse_samples(const nlohmann::json& samples) {
  if (!samples.is_array()) return lie("has benchmark.samples that is not an array");
  if (samples.size() > static_cast<std::size_t>(kMaxBenchmarkIterations)) {
    return lie(fmt::format("has {} samples, more than the limit of {}", samples.size(), kMaxBenchmarkIterations));
  }
  std::vector<WorkloadSample> out;
  bool seen_timed = false;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::string where = fmt::format("benchmark.samples[{}]", i);
    const auto& s = samples[i];
    WorkloadSample sample;
    KILN_BENCH_TRY(index, field<std::int64_t>(s, "index", where));
    KILN_BENCH_TRY(phase, field<std::string>(s, "phase", where));
    KILN_BENCH_TRY(start_ms, field<double>(s, "start_ms", where));
    KILN_BENCH_TRY(end_ms, field<double>(s, "end_ms", where));
    KILN_BENCH_TRY(throughput, field<double>(s, "throughput", where));
    if (index != static_cast<std::int64_t>(i)) return lie(fmt::format("has {} with index {}", where, index));
    if (phase == "warmup") {
      if (seen_timed) return lie(fmt::format("has a warmup sample after timed ones ({})", where));
      sample.phase = SamplePhase::warmup;
    } else if (phase == "timed") {
      seen_timed = true;
      sample.phase = SamplePhase::timed;
    } else {
      return lie(fmt::format("has {} with phase '{}' (expected \"warmup\" or \"timed\")", where, phase));
    }
    if (!(end_ms > start_ms)) return lie(fmt::format("has {} that ends ({}) before it starts ({})", where, end_ms, start_ms));
    if (!(throughput > 0)) return lie(fmt::format("has {} with throughput {} (must be positive)", where, throughput));
    if (!out.empty() && start_ms + kTimeSlackMs < out.back().end_ms) {
      return lie(fmt::format("has {} starting at {} before the previous sample ended at {}", where, start_ms,
                             out.back().end_ms));
    }
    sample.index = index;
    sample.start_ms = start_ms;
    sample.end_ms = end_ms;
    sample.throughput = throughput;
    out.push_back(sample);
  }
  return out;
}

Status check_warmup(const WorkloadResult& r, const BenchmarkSettings& asked) {
  const auto warmup = static_cast<std::int64_t>(
      std::count_if(r.samples.begin(), r.samples.end(), [](const auto& s) { return s.phase == SamplePhase::warmup; }));
  const auto timed = static_cast<std::int64_t>(r.samples.size()) - warmup;
  if (warmup != r.warmup_iterations) {
    return lie(fmt::format("says {} warmup iterations but holds {} warmup samples", r.warmup_iterations, warmup));
  }
  if (warmup > asked.warmup_max) {
    return lie(fmt::format("ran {} warmup iterations, more than warmup_max {}", warmup, asked.warmup_max));
  }
  if (r.steady_reached && r.warmup_max_reached) return lie("claims both steady_reached and max_reached");
  const bool preempted = r.status == WorkloadStatus::preempted;
  if (r.steady_reached) {
    if (warmup < asked.warmup_min || warmup < asked.steady_window) {
      return lie(fmt::format("claims steady after {} warmup iterations, fewer than warmup_min {} or the window {}",
                             warmup, asked.warmup_min, asked.steady_window));
    }
    std::vector<double> window;
    for (std::int64_t i = warmup - asked.steady_window; i < warmup; ++i) {
      window.push_back(r.samples[static_cast<std::size_t>(i)].throughput);
    }
    const auto [low, high] = std::minmax_element(window.begin(), window.end());
    const double spread = (*high - *low) / median(window);
    if (spread > asked.steady_tolerance + kSteadySlack) {
      return lie(fmt::format("claims steady, but its last {} warmup throughputs spread {:.4f}, more than the tolerance "
                             "{}",
                             asked.steady_window, spread, asked.steady_tolerance));
    }
  } else if (!preempted && (warmup != asked.warmup_max || !r.warmup_max_reached)) {
    return lie(fmt::format("stopped warming up after {} iterations without reaching steady or warmup_max {}", warmup,
                           asked.warmup_max));
  }
  if (!preempted && timed != asked.repeats) {
    return lie(fmt::format("holds {} timed samples but the agent asked for {} repeats", timed, asked.repeats));
  }
  if (preempted && timed > asked.repeats) {
    return lie(fmt::format("holds {} timed samples, more than the {} repeats asked", timed, asked.repeats));
  }
  if (timed > 0 && !r.steady_reached && !r.warmup_max_reached) {
    return lie("has timed samples although its warmup neither reached steady nor warmup_max");
  }
  return {};
}

}  // namespace

Status validate(const BenchmarkSettings& s) {
  if (s.warmup_min < 0 || s.warmup_max < s.warmup_min) {
    return fail(Errc::invalid_argument, fmt::format("benchmark warmup_min {} and warmup_max {} must satisfy 0 <= min <= "
                                                    "max; fix the model's benchmark settings",
                                                    s.warmup_min, s.warmup_max));
  }
  if (s.steady_window < 2) {
    return fail(Errc::invalid_argument, fmt::format("benchmark steady_window is {}; it must be at least 2 samples",
                                                    s.steady_window));
  }
  if (!(s.steady_tolerance > 0 && s.steady_tolerance < 1)) {
    return fail(Errc::invalid_argument, fmt::format("benchmark steady_tolerance is {}; it must be relative, in (0, 1), "
                                                    "e.g. 0.03",
                                                    s.steady_tolerance));
  }
  if (s.repeats < 1 || s.warmup_max + s.repeats > kMaxBenchmarkIterations) {
    return fail(Errc::invalid_argument, fmt::format("benchmark repeats is {}; it must be at least 1 and warmup_max plus "
                                                    "repeats at most {}",
                                                    s.repeats, kMaxBenchmarkIterations));
  }
  return {};
}

std::map<std::string, std::string> env_for(const BenchmarkSettings& s) {
  return {{"KILN_BENCH_WARMUP_MIN", std::to_string(s.warmup_min)},
          {"KILN_BENCH_WARMUP_MAX", std::to_string(s.warmup_max)},
          {"KILN_BENCH_STEADY_WINDOW", std::to_string(s.steady_window)},
          {"KILN_BENCH_STEADY_TOLERANCE", fmt::format("{}", s.steady_tolerance)},
          {"KILN_BENCH_REPEATS", std::to_string(s.repeats)}};
}

std::string_view to_string(SamplePhase phase) { return phase == SamplePhase::warmup ? "warmup" : "timed"; }
std::string_view to_string(WorkloadStatus status) {
  return status == WorkloadStatus::completed ? "completed" : "preempted";
}

Result<WorkloadResult> parse_workload_result(std::string_view text, const std::optional<BenchmarkSettings>& asked) {
  if (text.size() > kMaxResultBytes) {
    return fail(Errc::too_large, fmt::format("the workload's result document is {} bytes, over the {} byte limit; the "
                                             "workload must write less",
                                             text.size(), kMaxResultBytes));
  }
  WorkloadResult r;
  r.document = nlohmann::json::parse(text, nullptr, false);
  if (r.document.is_discarded()) return lie("is not valid JSON");
  if (!r.document.is_object()) return lie("is not a JSON object");
  KILN_BENCH_TRY(schema, field<std::string>(r.document, "schema", "the document"));
  if (schema != kResultSchema) return lie(fmt::format("has schema '{}', expected '{}'", schema, kResultSchema));
  KILN_BENCH_TRY(model, field<std::string>(r.document, "model", "the document"));
  KILN_BENCH_TRY(dtype, field<std::string>(r.document, "dtype", "the document"));
  KILN_BENCH_TRY(status, field<std::string>(r.document, "status", "the document"));
  KILN_BENCH_TRY(passed, field<bool>(r.document, "passed", "the document"));
  r.model = model;
  r.dtype = dtype;
  r.passed = passed;
  if (status == "completed") {
    r.status = WorkloadStatus::completed;
  } else if (status == "preempted") {
    r.status = WorkloadStatus::preempted;
  } else {
    return lie(fmt::format("has status '{}' (expected \"completed\" or \"preempted\")", status));
  }
  if (r.document.contains("correctness")) {
    KILN_BENCH_TRY(checked, field<bool>(r.document.at("correctness"), "checked", "correctness"));
    r.correctness_checked = checked;
    if (checked) {
      KILN_BENCH_TRY(verdict, field<bool>(r.document.at("correctness"), "passed", "correctness"));
      if (verdict != passed) return lie("has a top-level 'passed' that contradicts correctness.passed");
    }
  }
  if (!asked) return r;
  if (!r.document.contains("benchmark") || !r.document.at("benchmark").is_object()) {
    return lie("has no benchmark object although the agent passed KILN_BENCH_* settings");
  }
  const auto& bench = r.document.at("benchmark");
  KILN_BENCH_TRY(unit, field<std::string>(bench, "throughput_unit", "benchmark"));
  r.throughput_unit = unit;
  if (!bench.contains("settings")) return lie("has no benchmark.settings");
  if (auto echo = check_settings_echo(bench.at("settings"), *asked); !echo) return tl::unexpected(echo.error());
  if (!bench.contains("warmup")) return lie("has no benchmark.warmup");
  KILN_BENCH_TRY(iterations, field<std::int64_t>(bench.at("warmup"), "iterations", "benchmark.warmup"));
  KILN_BENCH_TRY(steady, field<bool>(bench.at("warmup"), "steady_reached", "benchmark.warmup"));
  KILN_BENCH_TRY(max_reached, field<bool>(bench.at("warmup"), "max_reached", "benchmark.warmup"));
  r.warmup_iterations = iterations;
  r.steady_reached = steady;
  r.warmup_max_reached = max_reached;
  if (!bench.contains("samples")) return lie("has no benchmark.samples");
  KILN_BENCH_TRY(samples, parse_samples(bench.at("samples")));
  r.samples = std::move(samples);
  if (auto warmup = check_warmup(r, *asked); !warmup) return tl::unexpected(warmup.error());
  return r;
}

BenchmarkReport make_report(const WorkloadResult& result, const std::vector<std::uint32_t>& job_chips,
                            std::span<const TelemetrySample> telemetry) {
  BenchmarkReport report;
  report.model = result.model;
  report.dtype = result.dtype;
  report.throughput_unit = result.throughput_unit;
  report.status = result.status;
  report.correctness_checked = result.correctness_checked;
  report.correctness_passed = result.passed;
  report.warmup_iterations = result.warmup_iterations;
  report.steady_reached = result.steady_reached;
  if (result.document.is_object()) {
    report.correctness = result.document.value("correctness", nlohmann::json());
    report.training = result.document.value("training", nlohmann::json());
  }

  // Per job chip: its readings in time order, and the spans its throttled readings cover.
  struct Span {
    double from_ms, to_ms;
  };
  std::map<std::uint32_t, std::vector<Span>> throttled_spans;
  for (std::uint32_t chip : job_chips) {
    std::vector<TelemetrySample> readings;
    for (const auto& t : telemetry) {
      if (t.chip == chip) readings.push_back(t);
    }
    std::stable_sort(readings.begin(), readings.end(), [](const auto& a, const auto& b) { return a.at_ms < b.at_ms; });
    ChipTelemetrySummary summary;
    summary.chip = chip;
    summary.readings = readings.size();
    double power_sum = 0;
    double clock_sum = 0;
    summary.min_clock_mhz = readings.empty() ? 0.0 : std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < readings.size(); ++i) {
      const auto& t = readings[i];
      summary.max_temperature_c = i == 0 ? t.temperature_c : std::max(summary.max_temperature_c, t.temperature_c);
      summary.min_clock_mhz = std::min(summary.min_clock_mhz, t.clock_mhz);
      power_sum += t.power_w;
      clock_sum += t.clock_mhz;
      if (!t.throttled) continue;
      ++summary.throttled_readings;
      const double inf = std::numeric_limits<double>::infinity();
      throttled_spans[chip].push_back({i == 0 ? -inf : static_cast<double>(readings[i - 1].at_ms),
                                       i + 1 == readings.size() ? inf : static_cast<double>(readings[i + 1].at_ms)});
    }
    if (!readings.empty()) {
      summary.mean_power_w = power_sum / static_cast<double>(readings.size());
      summary.mean_clock_mhz = clock_sum / static_cast<double>(readings.size());
    }
    report.telemetry.push_back(summary);
  }

  for (const auto& sample : result.samples) {
    FlaggedSample flagged;
    flagged.sample = sample;
    for (std::uint32_t chip : job_chips) {
      const auto& spans = throttled_spans[chip];
      const bool hit = std::any_of(spans.begin(), spans.end(), [&](const Span& s) {
        return sample.start_ms <= s.to_ms && sample.end_ms >= s.from_ms;
      });
      if (hit) flagged.throttled_chips.push_back(chip);
    }
    flagged.throttled = !flagged.throttled_chips.empty();
    if (sample.phase == SamplePhase::timed) {
      ++report.timed_samples;
      if (flagged.throttled) {
        ++report.flagged_timed_samples;
      } else {
        report.unflagged_timed_throughputs.push_back(sample.throughput);
      }
    }
    report.samples.push_back(std::move(flagged));
  }
  if (!report.unflagged_timed_throughputs.empty()) report.median_throughput = median(report.unflagged_timed_throughputs);
  return report;
}

nlohmann::json to_json(const BenchmarkReport& report) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& f : report.samples) {
    samples.push_back({{"index", f.sample.index},
                       {"phase", to_string(f.sample.phase)},
                       {"start_ms", f.sample.start_ms},
                       {"end_ms", f.sample.end_ms},
                       {"throughput", f.sample.throughput},
                       {"throttled", f.throttled},
                       {"throttled_chips", f.throttled_chips}});
  }
  nlohmann::json telemetry = nlohmann::json::array();
  for (const auto& t : report.telemetry) {
    telemetry.push_back({{"chip", t.chip},
                         {"readings", t.readings},
                         {"throttled_readings", t.throttled_readings},
                         {"max_temperature_c", t.max_temperature_c},
                         {"mean_power_w", t.mean_power_w},
                         {"min_clock_mhz", t.min_clock_mhz},
                         {"mean_clock_mhz", t.mean_clock_mhz}});
  }
  nlohmann::json median = nullptr;
  if (report.median_throughput) median = *report.median_throughput;
  return {{"model", report.model},
          {"dtype", report.dtype},
          {"status", to_string(report.status)},
          {"throughput_unit", report.throughput_unit},
          {"correctness_checked", report.correctness_checked},
          {"correctness_passed", report.correctness_passed},
          {"warmup_iterations", report.warmup_iterations},
          {"steady_reached", report.steady_reached},
          {"timed_samples", report.timed_samples},
          {"flagged_timed_samples", report.flagged_timed_samples},
          {"unflagged_timed_throughputs", report.unflagged_timed_throughputs},
          {"median_throughput", median},
          {"samples", samples},
          {"telemetry", telemetry},
          {"correctness", report.correctness},
          {"training", report.training}};
}

}  // namespace kiln::agent::bench
