#include <algorithm>
#include <cmath>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "agent/bench/bench.h"
#include "sim/workloads/bench_loop.h"

namespace wl = kiln::sim::workloads;
namespace ab = kiln::agent::bench;

namespace {

constexpr double kT0 = 1.7e12;  // an epoch time in ms

wl::BenchmarkLoop run_loop(const wl::BenchSettings& settings, std::uint64_t seed, double steady = 1000.0) {
  wl::BenchmarkLoop loop(settings, kiln::sim::PerfNoiseModel{}, 3.0, seed);
  double t = kT0;
  while (!loop.done()) t = loop.next(t, steady).end_ms;
  return loop;
}

std::string document_for(const wl::BenchmarkLoop& loop) {
  nlohmann::json doc = {{"schema", "kiln.workload-result/1"},
                        {"model", "mlp-bf16"},
                        {"dtype", "bf16"},
                        {"status", "completed"},
                        {"passed", true},
                        {"correctness", {{"checked", true}, {"passed", true}}},
                        {"benchmark", wl::benchmark_to_json(loop, "samples/s")}};
  return doc.dump();
}

}  // namespace

TEST_CASE("warmup runs until the last window is steady, then exactly the repeats") {
  const wl::BenchSettings settings{5, 100, 5, 0.03, 10};
  const auto loop = run_loop(settings, 11);
  CHECK(loop.steady_reached());
  CHECK_FALSE(loop.warmup_max_reached());
  CHECK(loop.timed_iterations() == 10);
  // The perf model ramps for 20 iterations; steady needs the ramp mostly done.
  CHECK(loop.warmup_iterations() >= 10);
  CHECK(loop.warmup_iterations() < 100);
  std::vector<double> window;
  for (int i = loop.warmup_iterations() - 5; i < loop.warmup_iterations(); ++i) window.push_back(loop.samples()[i].throughput);
  const auto [low, high] = std::minmax_element(window.begin(), window.end());
  std::sort(window.begin(), window.end());
  CHECK((*high - *low) / window[2] <= 0.03);
  // Each sample lasts its simulated time and follows the previous one.
  for (std::size_t i = 1; i < loop.samples().size(); ++i) {
    const auto& s = loop.samples()[i];
    CHECK(s.start_ms == loop.samples()[i - 1].end_ms);
    // Epoch milliseconds keep about 0.25 us of resolution in a double.
    CHECK(s.end_ms - s.start_ms == doctest::Approx(1000.0 * 3.0 / s.throughput).epsilon(1e-3));
  }
}

TEST_CASE("warmup stops at warmup_max and says so when the throughput never settles") {
  const auto loop = run_loop({0, 12, 5, 1e-6, 4}, 3);
  CHECK_FALSE(loop.steady_reached());
  CHECK(loop.warmup_max_reached());
  CHECK(loop.warmup_iterations() == 12);
  CHECK(loop.timed_iterations() == 4);
  const auto parsed = ab::parse_workload_result(document_for(loop), ab::BenchmarkSettings{0, 12, 5, 1e-6, 4});
  REQUIRE(parsed.has_value());
  CHECK(parsed->warmup_max_reached);
}

TEST_CASE("warmup_min holds timing back even when steady earlier") {
  const auto loop = run_loop({60, 100, 5, 0.5, 3}, 5);
  CHECK(loop.warmup_iterations() == 60);
  CHECK(loop.steady_reached());
}

TEST_CASE("the benchmark loop is deterministic under its seed and scales with the chip's throughput") {
  const wl::BenchSettings settings{5, 100, 5, 0.03, 10};
  const auto a = run_loop(settings, 9);
  const auto b = run_loop(settings, 9);
  const auto half = run_loop(settings, 9, 500.0);
  REQUIRE(a.samples().size() == b.samples().size());
  REQUIRE(a.samples().size() == half.samples().size());
  for (std::size_t i = 0; i < a.samples().size(); ++i) {
    CHECK(a.samples()[i].throughput == b.samples()[i].throughput);
    CHECK(half.samples()[i].throughput == doctest::Approx(a.samples()[i].throughput / 2));
  }
  CHECK(run_loop(settings, 10).samples()[0].throughput != a.samples()[0].throughput);
}

TEST_CASE("the agent's KILN_BENCH_* variables are what the workload reads") {
  const ab::BenchmarkSettings asked{3, 40, 4, 0.025, 7};
  REQUIRE(ab::validate(asked).has_value());
  const auto env = ab::env_for(asked);
  CHECK(env.size() == 5);
  auto parsed = wl::bench_settings_from_env([&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
  REQUIRE(parsed.has_value());
  REQUIRE(parsed->has_value());
  CHECK((*parsed)->warmup_min == 3);
  CHECK((*parsed)->warmup_max == 40);
  CHECK((*parsed)->steady_window == 4);
  CHECK((*parsed)->steady_tolerance == 0.025);
  CHECK((*parsed)->repeats == 7);

  auto none = wl::bench_settings_from_env([](const char*) -> std::optional<std::string> { return std::nullopt; });
  REQUIRE(none.has_value());
  CHECK_FALSE(none->has_value());
  auto bad = wl::bench_settings_from_env([](const char* name) -> std::optional<std::string> {
    return std::string(name) == "KILN_BENCH_REPEATS" ? std::optional<std::string>("ten") : std::nullopt;
  });
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("KILN_BENCH_REPEATS") != std::string::npos);

  CHECK_FALSE(ab::validate({5, 4, 5, 0.03, 10}).has_value());
  CHECK_FALSE(ab::validate({5, 100, 1, 0.03, 10}).has_value());
  CHECK_FALSE(ab::validate({5, 100, 5, 0.0, 10}).has_value());
  CHECK_FALSE(ab::validate({5, 100, 5, 0.03, 0}).has_value());
  CHECK_FALSE(ab::validate({5, 990, 5, 0.03, 20}).has_value());
}

TEST_CASE("result documents: a faithful one parses, malformed and lying ones are refused") {
  const wl::BenchSettings settings{5, 100, 5, 0.03, 10};
  const auto loop = run_loop(settings, 21);
  const ab::BenchmarkSettings asked = settings;
  const std::string good = document_for(loop);
  auto parsed = ab::parse_workload_result(good, asked);
  REQUIRE(parsed.has_value());
  CHECK(parsed->model == "mlp-bf16");
  CHECK(parsed->samples.size() == loop.samples().size());
  CHECK(parsed->steady_reached);
  CHECK(parsed->correctness_checked);

  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& expected) {
    auto doc = nlohmann::json::parse(good);
    edit(doc);
    auto r = ab::parse_workload_result(doc.dump(), asked);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == kiln::Errc::bad_message);
    CHECK_MESSAGE(r.error().message.find(expected) != std::string::npos, r.error().message);
  };
  refused([](auto& d) { d["benchmark"]["samples"].erase(d["benchmark"]["samples"].size() - 1); },
          "9 timed samples but the agent asked for 10");
  refused([](auto& d) { d["schema"] = "other/2"; }, "schema");
  refused([](auto& d) { d.erase("model"); }, "'model'");
  refused([](auto& d) { d["benchmark"]["settings"]["repeats"] = 3; }, "other than the agent passed");
  refused([](auto& d) { d["benchmark"]["samples"][3]["throughput"] = -1.0; }, "must be positive");
  refused([](auto& d) { d["benchmark"]["samples"][3]["end_ms"] = d["benchmark"]["samples"][3]["start_ms"]; }, "ends");
  refused([](auto& d) { d["benchmark"]["samples"][4]["start_ms"] = d["benchmark"]["samples"][2]["start_ms"]; },
          "before the previous sample ended");
  refused([](auto& d) { d["benchmark"]["samples"][2]["phase"] = "timed"; }, "warmup sample after timed");
  refused([](auto& d) { d["benchmark"]["warmup"]["iterations"] = 2; }, "warmup samples");
  refused([](auto& d) { d["status"] = "done"; }, "status");
  refused([](auto& d) { d["passed"] = false; }, "contradicts");
  refused([](auto& d) { d.erase("benchmark"); }, "no benchmark");
  refused([&](auto& d) {
    // A steady claim its own samples contradict.
    const int last = loop.warmup_iterations() - 1;
    d["benchmark"]["samples"][last]["throughput"] = d["benchmark"]["samples"][last]["throughput"].template get<double>() * 1.5;
  }, "claims steady");

  CHECK(ab::parse_workload_result("{not json", asked).error().code == kiln::Errc::bad_message);
  CHECK(ab::parse_workload_result(std::string(300 * 1024, ' '), asked).error().code == kiln::Errc::too_large);

  SUBCASE("a preempted workload may hold fewer repeats") {
    auto doc = nlohmann::json::parse(good);
    doc["status"] = "preempted";
    doc["benchmark"]["samples"].erase(doc["benchmark"]["samples"].size() - 1);
    auto r = ab::parse_workload_result(doc.dump(), asked);
    REQUIRE(r.has_value());
    CHECK(r->status == ab::WorkloadStatus::preempted);
  }
}

TEST_CASE("timed samples overlapping a throttled reading of one of the job's chips are flagged") {
  ab::WorkloadResult result;
  result.model = "mlp-bf16";
  result.status = ab::WorkloadStatus::completed;
  result.passed = true;
  // Warmup 0, then timed samples of 10 ms each from t = 1000 ms.
  result.samples.push_back({0, ab::SamplePhase::warmup, 990, 1000, 100});
  for (int i = 0; i < 6; ++i) {
    result.samples.push_back({i + 1, ab::SamplePhase::timed, 1000.0 + 10 * i, 1010.0 + 10 * i, 100.0 + i});
  }
  result.warmup_iterations = 1;
  const std::vector<ab::TelemetrySample> telemetry = {
      {995, 0, false, 70, 300, 1500},  {1015, 0, false, 71, 310, 1500}, {1032, 0, true, 92, 260, 900},
      {1048, 0, false, 75, 300, 1500}, {1030, 1, false, 70, 300, 1500}, {1035, 5, true, 95, 200, 900},
  };
  const auto report = ab::make_report(result, {0, 1}, telemetry);
  REQUIRE(report.samples.size() == 7);
  // The throttled reading at 1032 covers 1015..1048: samples [1010,1020] to [1040,1050]; the
  // reading of chip 5, not the job's, counts for nothing.
  std::vector<bool> flags;
  for (const auto& s : report.samples) flags.push_back(s.throttled);
  CHECK(flags == std::vector<bool>{false, false, true, true, true, true, false});
  CHECK(report.samples[2].throttled_chips == std::vector<std::uint32_t>{0});
  CHECK(report.timed_samples == 6);
  CHECK(report.flagged_timed_samples == 4);
  REQUIRE(report.unflagged_timed_throughputs.size() == 2);
  CHECK(*report.median_throughput == 102.5);
  REQUIRE(report.telemetry.size() == 2);
  CHECK(report.telemetry[0].throttled_readings == 1);
  CHECK(report.telemetry[0].min_clock_mhz == 900);
  CHECK(report.telemetry[0].max_temperature_c == 92);
  CHECK(report.telemetry[1].readings == 1);

  const auto json = ab::to_json(report);
  CHECK(json["flagged_timed_samples"] == 4);
  CHECK(json["median_throughput"] == 102.5);
  CHECK(json["samples"][2]["throttled"] == true);

  SUBCASE("without throttled readings nothing is flagged and the median uses every timed sample") {
    const auto clean = ab::make_report(result, {0}, std::span<const ab::TelemetrySample>(telemetry.data(), 2));
    CHECK(clean.flagged_timed_samples == 0);
    CHECK(*clean.median_throughput == doctest::Approx(102.5));
  }
  SUBCASE("a throttled first reading covers everything before the next one") {
    const std::vector<ab::TelemetrySample> early = {{1000, 0, true, 92, 260, 900}, {1025, 0, false, 70, 300, 1500}};
    const auto r = ab::make_report(result, {0}, early);
    CHECK(r.flagged_timed_samples == 3);  // [1000,1010], [1010,1020], [1020,1030]
  }
}

namespace {

// Runs a same-chip comparison the way kiln-workload-model does, on one clock.
struct Comparison {
  wl::BenchmarkLoop candidate;
  wl::BenchmarkLoop baseline;
  std::vector<wl::Stack> order;
};

Comparison run_comparison(const wl::BenchSettings& settings, double candidate_steady = 970.0,
                          double baseline_steady = 1000.0) {
  Comparison c{wl::BenchmarkLoop(settings, kiln::sim::PerfNoiseModel{}, 3.0, 31),
               wl::BenchmarkLoop(settings, kiln::sim::PerfNoiseModel{}, 3.0, 32), {}};
  double t = kT0;
  while (auto stack = wl::next_in_comparison(c.candidate, c.baseline)) {
    c.order.push_back(*stack);
    auto& loop = *stack == wl::Stack::candidate ? c.candidate : c.baseline;
    t = loop.next(t, *stack == wl::Stack::candidate ? candidate_steady : baseline_steady).end_ms;
  }
  return c;
}

std::string comparison_document(const Comparison& c) {
  auto doc = nlohmann::json::parse(document_for(c.candidate));
  doc["baseline_benchmark"] = wl::benchmark_to_json(c.baseline, "samples/s");
  return doc.dump();
}

}  // namespace

TEST_CASE("a comparison warms up the candidate, then the baseline, then alternates timed iterations ABBA") {
  const wl::BenchSettings settings{5, 100, 5, 0.03, 6};
  const auto c = run_comparison(settings);
  CHECK(c.candidate.done());
  CHECK(c.baseline.done());
  CHECK(c.candidate.timed_iterations() == 6);
  CHECK(c.baseline.timed_iterations() == 6);
  const auto candidate_warmup = static_cast<std::size_t>(c.candidate.warmup_iterations());
  const auto baseline_warmup = static_cast<std::size_t>(c.baseline.warmup_iterations());
  REQUIRE(c.order.size() == candidate_warmup + baseline_warmup + 12);
  for (std::size_t i = 0; i < candidate_warmup; ++i) CHECK(c.order[i] == wl::Stack::candidate);
  for (std::size_t i = candidate_warmup; i < candidate_warmup + baseline_warmup; ++i) CHECK(c.order[i] == wl::Stack::baseline);
  using S = wl::Stack;
  const std::vector<S> timed(c.order.begin() + static_cast<std::ptrdiff_t>(candidate_warmup + baseline_warmup), c.order.end());
  // B C C B B C C B B C C B: linear drift lands on both stacks' timed samples equally.
  CHECK(timed == std::vector<S>{S::baseline, S::candidate, S::candidate, S::baseline, S::baseline, S::candidate,
                                S::candidate, S::baseline, S::baseline, S::candidate, S::candidate, S::baseline});
}

TEST_CASE("result documents with a baseline_benchmark: checked like benchmark, malformed ones refused") {
  const wl::BenchSettings settings{5, 100, 5, 0.03, 10};
  const auto c = run_comparison(settings);
  const ab::BenchmarkSettings asked = settings;
  const std::string good = comparison_document(c);
  auto parsed = ab::parse_workload_result(good, asked);
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  REQUIRE(parsed->baseline.has_value());
  CHECK(parsed->baseline->samples.size() == c.baseline.samples().size());
  CHECK(parsed->baseline->steady_reached);
  CHECK(parsed->samples.size() == c.candidate.samples().size());

  const auto report = ab::make_report(*parsed, {0, 1}, {});
  REQUIRE(report.baseline.has_value());
  REQUIRE(report.baseline->median_throughput.has_value());
  CHECK(report.baseline->timed_samples == 10);
  CHECK(*report.median_throughput / *report.baseline->median_throughput == doctest::Approx(0.97).epsilon(0.03));
  CHECK(ab::to_json(report)["baseline"]["timed_samples"] == 10);

  // Without a baseline nothing changes: null or absent both mean none.
  auto none = nlohmann::json::parse(good);
  none["baseline_benchmark"] = nullptr;
  auto without = ab::parse_workload_result(none.dump(), asked);
  REQUIRE(without.has_value());
  CHECK_FALSE(without->baseline.has_value());
  CHECK_FALSE(ab::make_report(*without, {0}, {}).baseline.has_value());
  CHECK_FALSE(ab::to_json(ab::make_report(*without, {0}, {})).contains("baseline"));

  auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& expected) {
    auto doc = nlohmann::json::parse(good);
    edit(doc);
    auto r = ab::parse_workload_result(doc.dump(), asked);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == kiln::Errc::bad_message);
    CHECK_MESSAGE(r.error().message.find(expected) != std::string::npos, r.error().message);
  };
  auto& b = "baseline_benchmark";
  refused([&](auto& d) { d[b]["samples"].erase(d[b]["samples"].size() - 1); },
          "(baseline_benchmark) holds 9 timed samples but the agent asked for 10");
  refused([&](auto& d) { d[b]["settings"]["repeats"] = 3; }, "(baseline_benchmark) reports settings");
  refused([&](auto& d) { d[b]["samples"][3]["throughput"] = 0.0; }, "baseline_benchmark.samples[3] with throughput");
  refused([&](auto& d) { d[b]["samples"][2]["phase"] = "timed"; }, "warmup sample after timed");
  refused([&](auto& d) { d[b]["warmup"]["iterations"] = 1; }, "(baseline_benchmark) says 1 warmup iterations");
  refused([&](auto& d) { d[b]["warmup"].erase("steady_reached"); }, "'steady_reached' in baseline_benchmark.warmup");
  refused([&](auto& d) { d[b].erase("samples"); }, "no baseline_benchmark.samples");
  refused([&](auto& d) { d[b] = "fast"; }, "neither an object nor null");
  refused([&](auto& d) { d[b]["throughput_unit"] = "tokens/s"; }, "measures the baseline in 'tokens/s'");
  refused([&](auto& d) {
    // A baseline run at the same time as the candidate, not interleaved on the same chips.
    const double shift = d["benchmark"]["samples"][0]["start_ms"].template get<double>() -
                         d[b]["samples"][0]["start_ms"].template get<double>();
    for (auto& s : d[b]["samples"]) {
      s["start_ms"] = s["start_ms"].template get<double>() + shift;
      s["end_ms"] = s["end_ms"].template get<double>() + shift;
    }
  }, "overlapping");

  SUBCASE("a preempted comparison may hold fewer repeats of either") {
    auto doc = nlohmann::json::parse(good);
    doc["status"] = "preempted";
    doc[b]["samples"].erase(doc[b]["samples"].size() - 1);
    auto r = ab::parse_workload_result(doc.dump(), asked);
    REQUIRE_MESSAGE(r.has_value(), r.error().message);
    CHECK(r->baseline->samples.size() == c.baseline.samples().size() - 1);
  }
}

TEST_CASE("two benchmarks of the largest allowed size leave room in the 256 KiB result") {
  // Never steady: warmup_max + repeats = 1000 iterations for each stack.
  const auto c = run_comparison({0, 900, 5, 1e-9, 100}, 36000.0 * 0.97, 36000.0);
  REQUIRE(c.candidate.samples().size() == 1000);
  REQUIRE(c.baseline.samples().size() == 1000);
  const auto size = comparison_document(c).size();
  MESSAGE("two full benchmarks: ", size, " bytes");
  // The rest of a document (chips, stack effects, correctness reports) is a few KiB.
  CHECK(size + 16 * 1024 < ab::kMaxResultBytes);
}
