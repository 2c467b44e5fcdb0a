// The real kiln-workload-model and kiln-workload-smoke, run as the agent runs them: by argv,
// with the KILN_* environment, against the sim driver with its state under a temporary folder.
#include <signal.h>

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
  bool with_golden = true;
  std::optional<ab::BenchmarkSettings> bench = kSettings;

  std::string golden_dir() const { return dir / "golden"; }
  std::string result_file() const { return dir / "result.json"; }

  std::map<std::string, std::string> env() const {
    std::string options = "state_dir=" + (dir / "state") + ";chip_count=2;thermal_time_constant_ms=100;seed=5";
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
