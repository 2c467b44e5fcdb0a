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

// `name` is the benchmark object's key in the document ("benchmark" or "baseline_benchmark");
// `about` prefixes the messages of checks that do not name it themselves.
struct BenchmarkObject {
  std::string name;
  std::string about;
};

Status check_settings_echo(const nlohmann::json& settings, const BenchmarkSettings& asked, const BenchmarkObject& object) {
  const std::string where = object.name + ".settings";
  KILN_BENCH_TRY(warmup_min, field<std::int64_t>(settings, "warmup_min", where));
  KILN_BENCH_TRY(warmup_max, field<std::int64_t>(settings, "warmup_max", where));
  KILN_BENCH_TRY(window, field<std::int64_t>(settings, "steady_window", where));
  KILN_BENCH_TRY(tolerance, field<double>(settings, "steady_tolerance", where));
  KILN_BENCH_TRY(repeats, field<std::int64_t>(settings, "repeats", where));
  if (warmup_min != asked.warmup_min || warmup_max != asked.warmup_max || window != asked.steady_window ||
      std::abs(tolerance - asked.steady_tolerance) > 1e-12 || repeats != asked.repeats) {
    return lie(fmt::format("{}reports settings (warmup {}..{}, window {}, tolerance {}, repeats {}) other than the agent "
                           "passed (warmup {}..{}, window {}, tolerance {}, repeats {})",
                           object.about, warmup_min, warmup_max, window, tolerance, repeats, asked.warmup_min,
                           asked.warmup_max, asked.steady_window, asked.steady_tolerance, asked.repeats));
  }
  return {};
}

Result<std::vector<WorkloadSample>> parse_samples(const nlohmann::json& samples, const BenchmarkObject& object) {
  if (!samples.is_array()) return lie(fmt::format("has {}.samples that is not an array", object.name));
  if (samples.size() > static_cast<std::size_t>(kMaxBenchmarkIterations)) {
    return lie(fmt::format("{}has {} samples, more than the limit of {}", object.about, samples.size(),
                           kMaxBenchmarkIterations));
  }
  std::vector<WorkloadSample> out;
  bool seen_timed = false;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::string where = fmt::format("{}.samples[{}]", object.name, i);
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

Status check_warmup(const BenchmarkRun& r, WorkloadStatus status, const BenchmarkSettings& asked,
                    const BenchmarkObject& object) {
  const auto lie = [&](const std::string& what) { return bench::lie(object.about + what); };
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
  const bool preempted = status == WorkloadStatus::preempted;
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

Result<BenchmarkRun> parse_benchmark(const nlohmann::json& bench, WorkloadStatus status, const BenchmarkSettings& asked,
                                     const BenchmarkObject& object) {
  if (!bench.contains("settings")) return lie(fmt::format("has no {}.settings", object.name));
  if (auto echo = check_settings_echo(bench.at("settings"), asked, object); !echo) return tl::unexpected(echo.error());
  if (!bench.contains("warmup")) return lie(fmt::format("has no {}.warmup", object.name));
  const std::string warmup_where = object.name + ".warmup";
  BenchmarkRun run;
  KILN_BENCH_TRY(iterations, field<std::int64_t>(bench.at("warmup"), "iterations", warmup_where));
  KILN_BENCH_TRY(steady, field<bool>(bench.at("warmup"), "steady_reached", warmup_where));
  KILN_BENCH_TRY(max_reached, field<bool>(bench.at("warmup"), "max_reached", warmup_where));
  run.warmup_iterations = iterations;
  run.steady_reached = steady;
  run.warmup_max_reached = max_reached;
  if (!bench.contains("samples")) return lie(fmt::format("has no {}.samples", object.name));
  KILN_BENCH_TRY(samples, parse_samples(bench.at("samples"), object));
  run.samples = std::move(samples);
  if (auto warmup = check_warmup(run, status, asked, object); !warmup) return tl::unexpected(warmup.error());
  return run;
}

// Both stacks ran on the same chips, one iteration at a time: no candidate sample may overlap a
// baseline sample.
Status check_one_at_a_time(const std::vector<WorkloadSample>& candidate, const std::vector<WorkloadSample>& baseline) {
  std::size_t c = 0;
  std::size_t b = 0;
  while (c < candidate.size() && b < baseline.size()) {
    const auto& x = candidate[c];
    const auto& y = baseline[b];
    if (x.start_ms < y.end_ms - kTimeSlackMs && y.start_ms < x.end_ms - kTimeSlackMs) {
      return lie(fmt::format("has benchmark.samples[{}] ({} to {}) overlapping baseline_benchmark.samples[{}] ({} to "
                             "{}); the two stacks must run one iteration at a time on the same chips",
                             c, x.start_ms, x.end_ms, b, y.start_ms, y.end_ms));
    }
    if (x.end_ms <= y.end_ms) {
      ++c;
    } else {
      ++b;
    }
  }
  return {};
}

}  // namespace

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
  KILN_BENCH_TRY(outputs, parse_declared_outputs(r.document));
  r.outputs = std::move(outputs);
  if (!asked) return r;
  if (!r.document.contains("benchmark") || !r.document.at("benchmark").is_object()) {
    return lie("has no benchmark object although the agent passed KILN_BENCH_* settings");
  }
  const BenchmarkObject candidate{"benchmark", ""};
  KILN_BENCH_TRY(unit, field<std::string>(r.document.at("benchmark"), "throughput_unit", "benchmark"));
  r.throughput_unit = unit;
  KILN_BENCH_TRY(run, parse_benchmark(r.document.at("benchmark"), r.status, *asked, candidate));
  r.samples = std::move(run.samples);
  r.warmup_iterations = run.warmup_iterations;
  r.steady_reached = run.steady_reached;
  r.warmup_max_reached = run.warmup_max_reached;
  if (!r.document.contains("baseline_benchmark") || r.document.at("baseline_benchmark").is_null()) return r;

  const BenchmarkObject baseline{"baseline_benchmark", "(baseline_benchmark) "};
  const auto& object = r.document.at("baseline_benchmark");
  if (!object.is_object()) return lie("has a baseline_benchmark that is neither an object nor null");
  KILN_BENCH_TRY(baseline_unit, field<std::string>(object, "throughput_unit", baseline.name));
  if (baseline_unit != r.throughput_unit) {
    return lie(fmt::format("measures the baseline in '{}' but the candidate in '{}'", baseline_unit, r.throughput_unit));
  }
  KILN_BENCH_TRY(baseline_run, parse_benchmark(object, r.status, *asked, baseline));
  if (auto apart = check_one_at_a_time(r.samples, baseline_run.samples); !apart) return tl::unexpected(apart.error());
  r.baseline = std::move(baseline_run);
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

  const auto flag = [&](const std::vector<WorkloadSample>& samples, auto& out) {
    for (const auto& sample : samples) {
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
        ++out.timed_samples;
        if (flagged.throttled) {
          ++out.flagged_timed_samples;
        } else {
          out.unflagged_timed_throughputs.push_back(sample.throughput);
        }
      }
      out.samples.push_back(std::move(flagged));
    }
    if (!out.unflagged_timed_throughputs.empty()) out.median_throughput = median(out.unflagged_timed_throughputs);
  };
  flag(result.samples, report);
  if (result.baseline) {
    BaselineReport baseline;
    baseline.warmup_iterations = result.baseline->warmup_iterations;
    baseline.steady_reached = result.baseline->steady_reached;
    flag(result.baseline->samples, baseline);
    report.baseline = std::move(baseline);
  }
  return report;
}

namespace {

nlohmann::json samples_to_json(const std::vector<FlaggedSample>& flagged) {
  nlohmann::json samples = nlohmann::json::array();
  for (const auto& f : flagged) {
    samples.push_back({{"index", f.sample.index},
                       {"phase", to_string(f.sample.phase)},
                       {"start_ms", f.sample.start_ms},
                       {"end_ms", f.sample.end_ms},
                       {"throughput", f.sample.throughput},
                       {"throttled", f.throttled},
                       {"throttled_chips", f.throttled_chips}});
  }
  return samples;
}

nlohmann::json median_to_json(const std::optional<double>& median) {
  return median ? nlohmann::json(*median) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json to_json(const BenchmarkReport& report) {
  const nlohmann::json samples = samples_to_json(report.samples);
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
  nlohmann::json json = {{"schema", "kiln.benchmark-report/1"},
          {"model", report.model},
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
          {"median_throughput", median_to_json(report.median_throughput)},
          {"samples", samples},
          {"telemetry", telemetry},
          {"correctness", report.correctness},
          {"training", report.training}};
  if (report.baseline) {
    const auto& b = *report.baseline;
    json["baseline"] = {{"warmup_iterations", b.warmup_iterations},
                        {"steady_reached", b.steady_reached},
                        {"timed_samples", b.timed_samples},
                        {"flagged_timed_samples", b.flagged_timed_samples},
                        {"unflagged_timed_throughputs", b.unflagged_timed_throughputs},
                        {"median_throughput", median_to_json(b.median_throughput)},
                        {"samples", samples_to_json(b.samples)}};
  }
  return json;
}

}  // namespace kiln::agent::bench
