// The real kiln-workload-model and kiln-workload-smoke, run as the agent runs them: by argv,
// with the KILN_* environment, against the sim driver with its state under a temporary folder.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "agent/bench/bench.h"
#include "test_support.h"

namespace ab = kiln::agent::bench;
using kiln::workloads::testing::bin;
using kiln::workloads::testing::read_text;
using kiln::workloads::testing::run_process;
using kiln::workloads::testing::TempDir;

namespace {

const ab::BenchmarkSettings kSettings{5, 100, 5, 0.03, 10};

struct Job {
  TempDir dir;
  std::string model = "mlp-bf16";
  std::string chips = "0,1";
  std::string seed = "7";
  std::string fault_toml;       // sim fault file content, if any
  std::string stack_effects;    // KILN_SIM_STACK_EFFECTS content, if any
  std::string stack_effects_option;     // --stack-effects content, if any
  std::string baseline_stack_effects;   // --baseline-stack-effects content, if any
  bool with_golden = true;
  std::optional<ab::BenchmarkSettings> bench = kSettings;

  std::string golden_dir() const { return dir / "golden"; }
  std::string result_file() const { return dir / "result.json"; }

  std::map<std::string, std::string> env() const {
    std::string options = "state_dir=" + dir.file("state") + ";chip_count=2;thermal_time_constant_ms=100;seed=5";
    if (!fault_toml.empty()) options += ";fault_file=" + dir.write("faults.toml", fault_toml);
    std::map<std::string, std::string> e = {{"KILN_JOB_ID", "42"},
                                            {"KILN_ATTEMPT", "1"},
                                            {"KILN_NODE_ID", "sim-node"},
                                            {"KILN_CHIPS", chips},
                                            {"KILN_SEED", seed},
                                            {"KILN_DRIVER_LIBRARY", kiln::workloads::testing::sim_library()},
                                            {"KILN_DRIVER_OPTIONS", options},
                                            {"KILN_RESULT_FILE", result_file()},
                                            {"KILN_WORK_DIR", dir.path().string()}};
    if (!stack_effects.empty()) e["KILN_SIM_STACK_EFFECTS"] = dir.write("effects.toml", stack_effects);
    if (bench) {
      for (const auto& [k, v] : ab::env_for(*bench)) e[k] = v;
    }
    return e;
  }

  std::vector<std::string> argv() const {
    std::vector<std::string> args = {bin("kiln-workload-model"), "--model", model};
    if (with_golden) {
      args.push_back("--golden");
      args.push_back(golden_dir());
    }
    if (!stack_effects_option.empty()) {
      args.push_back("--stack-effects");
      args.push_back(dir.write("candidate.toml", stack_effects_option));
    }
    if (!baseline_stack_effects.empty()) {
      args.push_back("--baseline-stack-effects");
      args.push_back(dir.write("baseline.toml", baseline_stack_effects));
    }
    return args;
  }

  kiln::workloads::testing::ProcessEnd run(int timeout_ms = 20000,
                                           const std::function<void(pid_t)>& while_running = {}) const {
    if (with_golden) {
      const auto made = run_process({bin("kiln-workload-model"), "--model", model, "--write-golden", golden_dir()}, {},
                                    20000, {}, dir / "golden.out");
      REQUIRE(made.exit_code == 0);
    }
    return run_process(argv(), env(), timeout_ms, while_running, dir / "stdout.txt");
  }

  nlohmann::json result() const { return nlohmann::json::parse(read_text(result_file())); }

  ab::WorkloadResult parsed() const {
    auto parsed = ab::parse_workload_result(read_text(result_file()), *bench);
    REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
    return *parsed;
  }

  double median_throughput() const {
    const auto report = ab::make_report(parsed(), {0, 1}, {});
    REQUIRE(report.median_throughput.has_value());
    return *report.median_throughput;
  }

  // Candidate median over baseline median, from the agent's report.
  double candidate_over_baseline() const {
    const auto report = ab::make_report(parsed(), {0, 1}, {});
    REQUIRE(report.median_throughput.has_value());
    REQUIRE(report.baseline.has_value());
    REQUIRE(report.baseline->median_throughput.has_value());
    return *report.median_throughput / *report.baseline->median_throughput;
  }
};

}  // namespace

TEST_CASE("kiln-workload-model --list --json lists the registry") {
  TempDir dir;
  const auto end = run_process({bin("kiln-workload-model"), "--list", "--json"}, {}, 10000, {}, dir / "list.json");
  REQUIRE(end.exit_code == 0);
  const auto list = nlohmann::json::parse(read_text(dir / "list.json"));
  std::vector<std::string> names;
  for (const auto& m : list["models"]) names.push_back(m["name"]);
  CHECK(names == std::vector<std::string>{"mlp-bf16", "mlp-fp8", "transformer-block-bf16", "transformer-block-fp8",
                                          "train-tiny"});
}

TEST_CASE("a benchmark job on healthy chips: correct, every sample kept, a few seconds at most") {
  for (const std::string model : {"mlp-fp8", "transformer-block-bf16"}) {
    CAPTURE(model);
    Job job;
    job.model = model;
    const auto started = std::chrono::steady_clock::now();
    const auto end = job.run();
    const auto took = std::chrono::steady_clock::now() - started;
    REQUIRE(end.exit_code == 0);
    CHECK(took < std::chrono::seconds(5));
    const auto parsed = job.parsed();
    CHECK(parsed.model == model);
    CHECK(parsed.passed);
    CHECK(parsed.correctness_checked);
    CHECK(parsed.steady_reached);
    const auto doc = job.result();
    CHECK(doc["job"]["chips"] == std::vector<int>{0, 1});
    CHECK(doc["correctness"]["outputs"][0]["passed"] == true);
    CHECK(doc["benchmark"]["samples"].size() == static_cast<std::size_t>(parsed.warmup_iterations + 10));
    // Samples are paced on the wall clock, so the agent's telemetry lines up with them.
    const auto& samples = parsed.samples;
    CHECK(samples.back().end_ms - samples.front().start_ms > 10.0);
  }
}

TEST_CASE("a chip with silent data corruption fails the job's correctness") {
  Job job;
  job.fault_toml = "[[fault]]\nchip = 1\nkind = \"sdc\"\nfactor = 0.01\n";
  REQUIRE(job.run().exit_code == 1);
  const auto doc = job.result();
  CHECK(doc["passed"] == false);
  CHECK(doc["chips"][1]["sdc_active"] == true);
  CHECK(doc["correctness"]["outputs"][0]["report"]["mismatch_count"].get<int>() > 0);
  CHECK(job.parsed().passed == false);
}

TEST_CASE("a stack-effects numerics fault fails correctness; only for models using the kernel") {
  Job broken;
  broken.model = "transformer-block-fp8";
  broken.stack_effects = "[numerics]\nkernels = [\"gemm-fp8\"]\n";
  REQUIRE(broken.run().exit_code == 1);
  CHECK(broken.result()["stack_effects"]["faulty_kernels"] == std::vector<std::string>{"gemm-fp8"});

  Job unaffected;
  unaffected.model = "mlp-bf16";
  unaffected.stack_effects = "[numerics]\nkernels = [\"gemm-fp8\"]\n";
  CHECK(unaffected.run().exit_code == 0);

  Job invalid;
  invalid.stack_effects = "[numerics]\nkernels = [\"gemm-int4\"]\n";
  CHECK(invalid.run().exit_code == 2);
}

TEST_CASE("throughput scales with the stack's factor, a slow chip and throttling") {
  Job baseline;
  REQUIRE(baseline.run().exit_code == 0);
  const double base = baseline.median_throughput();

  Job regressed;
  regressed.stack_effects = "[throughput]\n\"mlp-bf16\" = 0.5\n";
  REQUIRE(regressed.run().exit_code == 0);
  // Same seed, same noise: exactly the factor.
  CHECK(regressed.median_throughput() / base == doctest::Approx(0.5).epsilon(1e-9));

  Job slow;
  slow.fault_toml = "[[fault]]\nchip = 1\nkind = \"slow\"\nfactor = 0.5\n";
  REQUIRE(slow.run().exit_code == 0);
  const double slow_ratio = slow.median_throughput() / base;
  CHECK(slow_ratio > 0.45);
  CHECK(slow_ratio < 0.55);

  Job hot;
  hot.fault_toml = "[[fault]]\nchip = 0\nkind = \"thermal_throttle\"\n";
  REQUIRE(hot.run().exit_code == 0);
  CHECK(hot.median_throughput() / base == doctest::Approx(0.6).epsilon(1e-9));
  CHECK(hot.result()["chips"][0]["throttled"] == true);
}

TEST_CASE("a job is deterministic under KILN_SEED") {
  Job a, b, c;
  c.seed = "8";
  REQUIRE(a.run().exit_code == 0);
  REQUIRE(b.run().exit_code == 0);
  REQUIRE(c.run().exit_code == 0);
  auto throughputs = [](const Job& job) {
    std::vector<double> out;
    for (const auto& s : job.parsed().samples) out.push_back(s.throughput);
    return out;
  };
  CHECK(throughputs(a) == throughputs(b));
  CHECK(throughputs(a) != throughputs(c));
  CHECK(a.result()["correctness"]["outputs"] == b.result()["correctness"]["outputs"]);
}

TEST_CASE("the training job reports its loss curve and eval score and follows the reference") {
  Job job;
  job.model = "train-tiny";
  REQUIRE(job.run().exit_code == 0);
  const auto doc = job.result();
  CHECK(doc["training"]["loss_curve"].size() == 20);
  CHECK(doc["training"]["eval"]["score"].get<double>() > 0.85);
  CHECK(doc["correctness"]["training"]["passed"] == true);
  CHECK(doc["correctness"]["training"]["eval_reference"].get<double>() > 0.85);
  const auto report = ab::to_json(ab::make_report(job.parsed(), {0, 1}, {}));
  CHECK(report["training"]["loss_curve"].size() == 20);
}

TEST_CASE("a hung chip makes the workload hang until its deadline") {
  Job job;
  job.fault_toml = "[[fault]]\nchip = 0\nkind = \"hang\"\n";
  const auto end = job.run(1000);
  CHECK(end.timed_out);
}

TEST_CASE("SIGUSR1 is a preemption notice: checkpoint, result, exit 0 soon") {
  Job job;
  job.bench = ab::BenchmarkSettings{0, 900, 5, 1e-9, 10};  // never steady: runs for seconds
  const auto started = std::chrono::steady_clock::now();
  const auto end = job.run(20000, [](pid_t pid) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    ::kill(pid, SIGUSR1);
  });
  REQUIRE(end.exit_code == 0);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1500));
  const auto doc = job.result();
  CHECK(doc["status"] == "preempted");
  const auto checkpoint = nlohmann::json::parse(read_text(doc["checkpoint"].get<std::string>()));
  CHECK(checkpoint["iterations_done"].get<int>() > 0);
  CHECK(job.parsed().status == ab::WorkloadStatus::preempted);
}

TEST_CASE("without KILN_BENCH_* or a golden the job only computes; bad settings are refused") {
  Job plain;
  plain.bench.reset();
  plain.with_golden = false;
  REQUIRE(plain.run().exit_code == 0);
  CHECK(plain.result()["benchmark"].is_null());
  CHECK(plain.result()["correctness"]["checked"] == false);
  auto parsed = ab::parse_workload_result(read_text(plain.result_file()), std::nullopt);
  REQUIRE(parsed.has_value());
  CHECK(parsed->samples.empty());
  CHECK_FALSE(parsed->correctness_checked);
  CHECK(parsed->passed);

  Job bad;
  bad.bench = ab::BenchmarkSettings{5, 100, 1, 0.03, 10};  // a window of one sample
  CHECK(bad.run().exit_code == 2);
}

TEST_CASE("the smoke workload still runs") {
  Job job;
  const auto end = run_process({bin("kiln-workload-smoke")}, job.env(), 20000, {}, job.dir / "smoke.out");
  CHECK(end.exit_code == 0);
  CHECK(job.result()["workload"] == "smoke");
  auto parsed = ab::parse_workload_result(read_text(job.result_file()), std::nullopt);
  REQUIRE_MESSAGE(parsed.has_value(), parsed.error().message);
  CHECK(parsed->passed);
}

TEST_CASE("--stack-effects wins over KILN_SIM_STACK_EFFECTS") {
  Job job;
  job.stack_effects = "[throughput]\n\"mlp-bf16\" = 0.5\n";
  job.stack_effects_option = "[throughput]\n\"mlp-bf16\" = 0.25\n";
  REQUIRE(job.run().exit_code == 0);
  CHECK(job.result()["stack_effects"]["throughput_factors"]["mlp-bf16"] == 0.25);
  CHECK(job.result()["stack_effects"]["source"].get<std::string>().ends_with("candidate.toml"));
  CHECK_FALSE(job.result().contains("baseline_benchmark"));

  Job missing;
  missing.bench.reset();
  missing.with_golden = false;
  auto args = missing.argv();
  args.push_back("--baseline-stack-effects");
  args.push_back(missing.dir / "no-such.toml");
  const auto end = run_process(args, missing.env(), 20000, {}, missing.dir / "stdout.txt");
  CHECK(end.exit_code == 2);
}

TEST_CASE("a baseline stack is measured on the same chips, interleaved: a 3% slower candidate shows 3%") {
  // Several seeds: the comparison holds for the noise model, not for one lucky draw.
  for (const std::string seed : {"7", "8", "9"}) {
    CAPTURE(seed);
    Job job;
    job.seed = seed;
    job.bench = ab::BenchmarkSettings{5, 100, 5, 0.03, 20};
    job.stack_effects_option = "[throughput]\n\"mlp-bf16\" = 0.97\n";
    job.baseline_stack_effects = "[throughput]\ndefault = 1.0\n";
    REQUIRE(job.run().exit_code == 0);
    const auto parsed = job.parsed();
    REQUIRE(parsed.baseline.has_value());
    const auto timed = [](const std::vector<ab::WorkloadSample>& samples) {
      return std::count_if(samples.begin(), samples.end(),
                           [](const auto& s) { return s.phase == ab::SamplePhase::timed; });
    };
    CHECK(timed(parsed.samples) == 20);
    CHECK(timed(parsed.baseline->samples) == 20);
    const double ratio = job.candidate_over_baseline();
    CHECK(ratio > 1.0 - 0.045);
    CHECK(ratio < 1.0 - 0.015);

    const auto doc = job.result();
    CHECK(doc["baseline_stack_effects"]["default_throughput_factor"] == 1.0);
    CHECK(doc["stack_effects"]["throughput_factors"]["mlp-bf16"] == 0.97);
    CHECK(doc["baseline_benchmark"]["settings"] == doc["benchmark"]["settings"]);
    // Interleaved: the timed phases overlap in time rather than one after the other.
    const auto first_timed = [](const std::vector<ab::WorkloadSample>& samples) {
      return *std::find_if(samples.begin(), samples.end(), [](const auto& s) { return s.phase == ab::SamplePhase::timed; });
    };
    CHECK(first_timed(parsed.samples).start_ms < parsed.baseline->samples.back().start_ms);
    CHECK(first_timed(parsed.baseline->samples).start_ms < parsed.samples.back().start_ms);
  }
}

TEST_CASE("with identical stacks the two medians agree within 1.5%") {
  for (const std::string seed : {"7", "8", "9"}) {
    CAPTURE(seed);
    Job job;
    job.seed = seed;
    job.bench = ab::BenchmarkSettings{5, 100, 5, 0.03, 20};
    job.baseline_stack_effects = "[throughput]\ndefault = 1.0\n";
    REQUIRE(job.run().exit_code == 0);
    const double ratio = job.candidate_over_baseline();
    CHECK(ratio > 0.985);
    CHECK(ratio < 1.015);
    // Two independent measurements, not one replayed.
    CHECK(job.result()["benchmark"]["samples"] != job.result()["baseline_benchmark"]["samples"]);
  }
}

TEST_CASE("correctness is judged on the candidate stack only") {
  Job broken_baseline;
  broken_baseline.baseline_stack_effects = "[numerics]\nkernels = [\"gemm-bf16\"]\n";
  CHECK(broken_baseline.run().exit_code == 0);
  CHECK(broken_baseline.result()["baseline_stack_effects"]["faulty_kernels"] == std::vector<std::string>{"gemm-bf16"});

  Job broken_candidate;
  broken_candidate.stack_effects_option = "[numerics]\nkernels = [\"gemm-bf16\"]\n";
  broken_candidate.baseline_stack_effects = "[throughput]\ndefault = 1.0\n";
  CHECK(broken_candidate.run().exit_code == 1);
  CHECK(broken_candidate.result()["passed"] == false);
}

TEST_CASE("SIGUSR1 during a comparison writes both partial sample sets") {
  Job job;
  job.bench = ab::BenchmarkSettings{0, 20, 5, 1e-9, 400};  // never steady: 20 warmup each, then seconds of repeats
  job.baseline_stack_effects = "[throughput]\ndefault = 1.0\n";
  const auto started = std::chrono::steady_clock::now();
  const auto end = job.run(20000, [](pid_t pid) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    ::kill(pid, SIGUSR1);
  });
  REQUIRE(end.exit_code == 0);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1500));
  const auto parsed = job.parsed();
  CHECK(parsed.status == ab::WorkloadStatus::preempted);
  REQUIRE(parsed.baseline.has_value());
  CHECK(parsed.samples.size() > 20);
  CHECK(parsed.baseline->samples.size() > 20);
  CHECK(parsed.samples.size() < 420);
  const auto checkpoint = nlohmann::json::parse(read_text(job.result()["checkpoint"].get<std::string>()));
  CHECK(checkpoint["baseline_iterations_done"].get<std::size_t>() == parsed.baseline->samples.size());
}
