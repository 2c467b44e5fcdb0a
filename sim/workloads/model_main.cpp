// kiln-workload-model: the registry's models as jobs on the simulated chip. It binds the job's
// chips through the driver, computes the model on the CPU with the chip's numerics emulated,
// compares the outputs with the fp32 golden, runs the benchmark the agent asked for (warmup
// until steady, then timed repeats; throughput from the sim's performance model) and writes
// the result document. The contract is docs/workloads.md.
//
//   kiln-workload-model --list [--json]
//   kiln-workload-model --model M --write-golden DIR [--data-seed N]
//   kiln-workload-model --model M [--golden DIR] [--data-seed N]      (as a job, from kiln-agent)
//       [--stack-effects FILE] [--baseline-stack-effects FILE]
//
// With a baseline stack, a benchmark job measures both stacks on the same chips in one process,
// interleaved (next_in_comparison), so the chips' own speed cancels out of the comparison.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/stability/report.h"
#include "common/stats/rng.h"
#include "drivers/loader.h"
#include "sim/chip/sim_node.h"
#include "sim/perf/perf_model.h"
#include "sim/workloads/bench_loop.h"
#include "sim/workloads/golden.h"
#include "sim/workloads/models.h"
#include "sim/workloads/registry.h"
#include "sim/workloads/stack_effects.h"
#include "common/version.h"

namespace {

namespace fs = std::filesystem;
namespace wl = kiln::sim::workloads;

constexpr int kExitOk = 0;
constexpr int kExitIncorrect = 1;
constexpr int kExitCannotRun = 2;
constexpr std::size_t kMaxResultBytes = 256 * 1024;

volatile std::sig_atomic_t g_preempted = 0;
extern "C" void on_preemption_notice(int) { g_preempted = 1; }

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

int cannot_run(const std::string& why) {
  std::fprintf(stderr, "kiln-workload-model: %s\n", why.c_str());
  return kExitCannotRun;
}

double now_epoch_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Paces wall time to simulated time; returns early on a preemption notice.
void sleep_until_epoch_ms(double target_ms) {
  for (;;) {
    const double remaining_ms = target_ms - now_epoch_ms();
    if (remaining_ms <= 0 || g_preempted) return;
    const double step_ms = std::min(remaining_ms, 5.0);
    timespec ts{0, static_cast<long>(step_ms * 1e6)};
    ::nanosleep(&ts, nullptr);
  }
}

// A workload touching a hung chip blocks, as on hardware: only the agent's deadline ends it.
[[noreturn]] void hang_forever() {
  for (;;) ::pause();
}

kiln::Result<std::vector<std::uint32_t>> parse_chips(const std::string& text) {
  std::vector<std::uint32_t> chips;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    char* stop = nullptr;
    const unsigned long value = std::strtoul(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || value > 1024) {
      return kiln::fail(kiln::Errc::invalid_argument,
                        fmt::format("KILN_CHIPS='{}' is not a comma-separated list of chip indices", text));
    }
    chips.push_back(static_cast<std::uint32_t>(value));
    start = end + 1;
  }
  return chips;
}

bool write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return false;
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  return !ec;
}

nlohmann::json conditions_to_json(const kiln::sim::ChipConditions& c) {
  return {{"chip", c.chip},
          {"revision", kiln::sim::to_string(c.revision)},
          {"firmware_version", c.firmware_version},
          {"speed_factor", c.speed_factor},
          {"throttled", c.throttled},
          {"sdc_active", c.sdc_active}};
}

struct ChipsNow {
  double steady_throughput = 0;
  std::vector<kiln::sim::ChipConditions> conditions;
};

// The job's throughput now: data parallel over its chips, so the slowest chip sets the pace.
kiln::Result<ChipsNow> read_chips(const kiln::sim::SimNode& node, const std::vector<std::uint32_t>& chips,
                                  const wl::ModelSpec& spec, const wl::StackEffects& effects) {
  ChipsNow now;
  double slowest = 1e9;
  bool throttled = false;
  for (std::uint32_t chip : chips) {
    auto c = node.conditions(chip);
    if (!c) return tl::unexpected(c.error());
    if (c->hung) hang_forever();
    slowest = std::min(slowest, c->silicon_factor * c->slow_factor);
    throttled = throttled || c->throttled;
    now.conditions.push_back(*c);
  }
  const double base = spec.base_throughput(kiln::sim::to_string(node.revision())) * static_cast<double>(chips.size());
  now.steady_throughput = kiln::sim::steady_throughput(base, effects.throughput_factor(spec.name), slowest, throttled);
  return now;
}

int list_models(bool json) {
  if (json) {
    std::cout << wl::registry_to_json().dump(2) << "\n";
    return kExitOk;
  }
  for (const auto& m : wl::model_registry()) {
    std::cout << fmt::format("{:<24} {:<9} {:<8} {:<6} a {:>8} b {:>8} {:<9}  {}\n", m.name, wl::to_string(m.kind),
                             m.dtype, m.size_class, m.base_throughput_rev_a, m.base_throughput_rev_b, m.throughput_unit,
                             fmt::join(m.components, ","));
  }
  return kExitOk;
}

struct JobArgs {
  const wl::ModelSpec* spec = nullptr;
  std::optional<std::string> golden_dir;
  std::uint64_t data_seed = 1;
  std::optional<std::string> stack_effects_file;           // --stack-effects, else KILN_SIM_STACK_EFFECTS
  std::optional<std::string> baseline_stack_effects_file;  // --baseline-stack-effects
};

kiln::Result<wl::StackEffects> read_effects(const std::string& path, const char* named_by) {
  auto read = wl::read_stack_effects_file(path);
  if (!read) return kiln::fail(read.error().code, fmt::format("{}: {}", named_by, read.error().message));
  return read;
}

// The benchmark phase: one loop, or the candidate and the baseline interleaved on the same chips.
struct Benchmarks {
  std::optional<wl::BenchmarkLoop> candidate;
  std::optional<wl::BenchmarkLoop> baseline;
};

kiln::Status run_benchmarks(Benchmarks& loops, const kiln::sim::SimNode& node, const std::vector<std::uint32_t>& chips,
                            const wl::ModelSpec& spec, const wl::StackEffects& effects,
                            const std::optional<wl::StackEffects>& baseline_effects, double started_ms) {
  double next_start_ms = started_ms;
  while (!g_preempted) {
    std::optional<wl::Stack> stack;
    if (loops.baseline) {
      stack = wl::next_in_comparison(*loops.candidate, *loops.baseline);
    } else if (!loops.candidate->done()) {
      stack = wl::Stack::candidate;
    }
    if (!stack) break;
    const bool baseline = *stack == wl::Stack::baseline;
    auto now = read_chips(node, chips, spec, baseline ? *baseline_effects : effects);
    if (!now) return tl::unexpected(now.error());
    wl::BenchmarkLoop& loop = baseline ? *loops.baseline : *loops.candidate;
    const wl::Sample sample = loop.next(next_start_ms, now->steady_throughput);
    sleep_until_epoch_ms(sample.end_ms);
    next_start_ms = sample.end_ms;
  }
  return {};
}

// This node's place in a gang, from torch.distributed's variables (kiln-agent sets them for a
// rank of a gang); nothing when they are unset.
struct GangPlace {
  std::uint64_t rank = 0;
  std::uint64_t world_size = 1;
  std::string master;  // MASTER_ADDR:MASTER_PORT
};

kiln::Result<std::optional<GangPlace>> gang_place() {
  const auto rank = env("RANK");
  const auto world = env("WORLD_SIZE");
  if (!rank && !world) return std::optional<GangPlace>{};
  const auto number = [](const std::optional<std::string>& text) -> std::optional<std::uint64_t> {
    if (!text || text->empty() || text->size() > 6) return std::nullopt;
    if (!std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    return std::stoull(*text);
  };
  GangPlace place;
  const auto r = number(rank);
  const auto w = number(world);
  if (!r || !w || *w == 0 || *r >= *w) {
    return kiln::fail(kiln::Errc::invalid_argument,
                      fmt::format("RANK='{}' and WORLD_SIZE='{}' are not a rank below a world size; kiln-agent sets "
                                  "both for a rank of a gang, unset them to run alone",
                                  rank.value_or(""), world.value_or("")));
  }
  place.rank = *r;
  place.world_size = *w;
  place.master = fmt::format("{}:{}", env("MASTER_ADDR").value_or("?"), env("MASTER_PORT").value_or("?"));
  return std::optional<GangPlace>{place};
}

// What kiln-agent tells every job through its environment (docs/workloads.md).
struct JobEnv {
  std::string library;
  std::vector<std::uint32_t> chips;
  fs::path result_file;
  fs::path work_dir;
  std::uint64_t seed = 1;
  std::optional<GangPlace> gang;
  std::string driver_options;
};

kiln::Result<JobEnv> read_job_env() {
  JobEnv job;
  job.library = env("KILN_DRIVER_LIBRARY").value_or("");
  if (job.library.empty()) {
    return kiln::fail(kiln::Errc::invalid_argument, "KILN_DRIVER_LIBRARY is not set; run me through kiln-agent");
  }
  auto chips = parse_chips(env("KILN_CHIPS").value_or(""));
  if (!chips) return kiln::fail(chips.error().code, chips.error().message + "; kiln-agent sets it");
  job.chips = *chips;
  job.result_file = env("KILN_RESULT_FILE").value_or("result.json");
  job.work_dir = env("KILN_WORK_DIR").value_or(".");
  const std::string seed_text = env("KILN_SEED").value_or("1");
  char* seed_end = nullptr;
  job.seed = std::strtoull(seed_text.c_str(), &seed_end, 10);
  if (seed_text.empty() || *seed_end != '\0') {
    return kiln::fail(kiln::Errc::invalid_argument,
                      fmt::format("KILN_SEED='{}' is not an unsigned 64-bit number; kiln-agent sets it", seed_text));
  }
  // The simulated models compute each node's share alone; the rank is said and recorded, so a
  // gang's output shows each node's place in it.
  auto gang = gang_place();
  if (!gang) return tl::unexpected(gang.error());
  job.gang = *gang;
  if (job.gang) {
    std::fprintf(stderr, "kiln-workload-model: rank %llu of %llu, rendezvous at %s\n",
                 static_cast<unsigned long long>(job.gang->rank), static_cast<unsigned long long>(job.gang->world_size),
                 job.gang->master.c_str());
  }
  job.driver_options = env("KILN_DRIVER_OPTIONS").value_or("");
  return job;
}

nlohmann::json job_json(const JobEnv& job, std::uint64_t data_seed) {
  return {{"id", env("KILN_JOB_ID").value_or("")},
          {"attempt", env("KILN_ATTEMPT").value_or("")},
          {"node_id", env("KILN_NODE_ID").value_or("")},
          {"chips", job.chips},
          {"seed", job.seed},
          {"data_seed", data_seed},
          {"rank", job.gang ? job.gang->rank : 0},
          {"world_size", job.gang ? job.gang->world_size : 1}};
}

int run_job(const JobArgs& args) {
  const wl::ModelSpec& spec = *args.spec;
  auto job = read_job_env();
  if (!job) return cannot_run(job.error().message);
  const std::vector<std::uint32_t>* chips = &job->chips;
  const std::uint64_t seed = job->seed;
  const fs::path& result_file = job->result_file;
  const fs::path& work_dir = job->work_dir;
  const std::string& options = job->driver_options;
  auto bench = wl::bench_settings_from_env(env);
  if (!bench) return cannot_run(bench.error().message);
  wl::StackEffects effects;
  if (args.stack_effects_file) {
    auto read = read_effects(*args.stack_effects_file, "--stack-effects");
    if (!read) return cannot_run(read.error().message);
    effects = *read;
  } else if (auto path = env("KILN_SIM_STACK_EFFECTS"); path && !path->empty()) {
    auto read = read_effects(*path, "KILN_SIM_STACK_EFFECTS");
    if (!read) return cannot_run(read.error().message);
    effects = *read;
  }
  std::optional<wl::StackEffects> baseline_effects;
  if (args.baseline_stack_effects_file) {
    auto read = read_effects(*args.baseline_stack_effects_file, "--baseline-stack-effects");
    if (!read) return cannot_run(read.error().message);
    baseline_effects = *read;
  }

  struct sigaction action {};
  action.sa_handler = on_preemption_notice;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGUSR1, &action, nullptr);

  auto driver = kiln::drivers::Driver::load(job->library, options);
  if (!driver) return cannot_run(driver.error().message);
  if (auto bound = (*driver)->bind_workload(::getpid(), *chips); !bound) {
    return cannot_run("cannot bind chips: " + bound.error().message);
  }
  auto node = kiln::sim::SimNode::open(options);
  if (!node) {
    return cannot_run("the simulated models need the sim driver's node (KILN_DRIVER_OPTIONS): " + node.error().message);
  }
  auto start = read_chips(*node, *chips, spec, effects);
  if (!start) return cannot_run(start.error().message);

  // The model, computed once on the emulated chip; a chip with silent data corruption
  // corrupts its share of the outputs.
  wl::ModelRunOptions run_options;
  run_options.data_seed = args.data_seed;
  run_options.faulty_kernels = effects.faulty_kernels;
  for (const auto& c : start->conditions) {
    if (c.sdc_active) {
      run_options.sdc_rate = std::max(run_options.sdc_rate, c.sdc_rate);
      run_options.sdc_seed = kiln::stats::derive_seed(c.chip_seed, seed);
    }
  }
  auto run = wl::run_model(spec, run_options);
  if (!run) return cannot_run(run.error().message);

  nlohmann::json correctness = {{"checked", false}, {"passed", true}};
  bool correct = true;
  if (args.golden_dir) {
    auto golden = wl::read_golden(*args.golden_dir, spec, args.data_seed);
    if (!golden) return cannot_run(golden.error().message);
    auto checked = wl::check_correctness(spec, *golden, *run);
    if (!checked) return cannot_run(checked.error().message);
    correctness = checked->document;
    correctness["golden_dir"] = *args.golden_dir;
    correct = checked->passed;
  }
  // The outputs for kiln to judge as well, when the goldens came with the job as its artifacts
  // and so are where the agent looks for them (docs/workloads.md, "Outputs kiln judges").
  nlohmann::json outputs = nlohmann::json::array();
  std::error_code same_error;
  if (args.golden_dir && !run->outputs.empty() &&
      fs::equivalent(*args.golden_dir, work_dir / "artifacts", same_error)) {
    const std::string file = "outputs/" + spec.name + ".safetensors";
    std::error_code ec;
    fs::create_directories(work_dir / "outputs", ec);
    if (auto written = kiln::numerics::write_safetensors_file(work_dir / file, run->outputs); !written) {
      return cannot_run("cannot write the outputs for kiln to judge: " + written.error().message);
    }
    for (const auto& output : run->outputs) outputs.push_back({{"name", output.name}, {"file", file}});
  }

  const double started_ms = now_epoch_ms();
  nlohmann::json benchmark = nullptr;
  nlohmann::json baseline_benchmark = nullptr;
  if (*bench) {
    kiln::sim::PerfNoiseModel noise;
    Benchmarks loops;
    // Run-to-run noise belongs to the chip as much as to the job: the same job on another chip
    // (another node, another revision) is an independent measurement.
    const std::uint64_t noise_seed = kiln::stats::derive_seed(seed, start->conditions.front().chip_seed);
    loops.candidate.emplace(**bench, noise, spec.items_per_iteration, kiln::stats::derive_seed(noise_seed, 0xBE4C));
    // Its own noise stream: two stacks are two independent measurements, not one replayed.
    if (baseline_effects) {
      loops.baseline.emplace(**bench, noise, spec.items_per_iteration, kiln::stats::derive_seed(noise_seed, 0xBA5E));
    }
    if (auto ran = run_benchmarks(loops, *node, *chips, spec, effects, baseline_effects, started_ms); !ran) {
      return cannot_run(ran.error().message);
    }
    benchmark = wl::benchmark_to_json(*loops.candidate, spec.throughput_unit);
    if (loops.baseline) baseline_benchmark = wl::benchmark_to_json(*loops.baseline, spec.throughput_unit);
  }

  nlohmann::json chips_json = nlohmann::json::array();
  for (const auto& c : start->conditions) chips_json.push_back(conditions_to_json(c));
  nlohmann::json result = {
      {"schema", "kiln.workload-result/1"},
      {"workload", "kiln-workload-model"},
      {"model", spec.name},
      {"kind", wl::to_string(spec.kind)},
      {"dtype", spec.dtype},
      {"components", spec.components},
      {"status", g_preempted ? "preempted" : "completed"},
      {"passed", correct},
      {"job", job_json(*job, args.data_seed)},
      {"chips", chips_json},
      {"stack_effects", wl::to_json(effects)},
      {"benchmark", benchmark},
      {"correctness", correctness},
      {"outputs", outputs},
      {"wall_time_ms", now_epoch_ms() - started_ms},
  };
  if (baseline_effects) {
    result["baseline_stack_effects"] = wl::to_json(*baseline_effects);
    result["baseline_benchmark"] = baseline_benchmark;
  }
  if (spec.kind == wl::ModelKind::training) {
    result["training"] = {{"loss_curve", wl::loss_curve_to_json(run->loss_curve)},
                          {"loss_every_steps", wl::kLossCurveEverySteps},
                          {"eval", {{"metric", "accuracy"}, {"score", run->eval_score.value_or(0.0)}}}};
  }
  if (g_preempted) {
    // The models compute in one piece, so the checkpoint records how far the benchmark got;
    // a new attempt starts over, which one seed makes reproducible.
    const fs::path checkpoint = work_dir / "checkpoint.json";
    nlohmann::json state = {{"model", spec.name},
                            {"data_seed", args.data_seed},
                            {"iterations_done", benchmark.is_null() ? 0 : benchmark["samples"].size()}};
    if (!baseline_benchmark.is_null()) state["baseline_iterations_done"] = baseline_benchmark["samples"].size();
    if (!write_file_atomically(checkpoint, state.dump() + "\n")) {
      return cannot_run("cannot write the checkpoint " + checkpoint.string());
    }
    result["checkpoint"] = checkpoint.string();
  }
  const std::string text = result.dump() + "\n";
  if (text.size() > kMaxResultBytes) {
    return cannot_run(fmt::format("the result document is {} bytes, over the {} byte limit; ask for fewer iterations",
                                  text.size(), kMaxResultBytes));
  }
  if (!write_file_atomically(result_file, text)) return cannot_run("cannot write the result file " + result_file.string());
  (void)(*driver)->unbind_workload(::getpid());
  std::printf("%s: %s%s\n", spec.name.c_str(), g_preempted ? "preempted, checkpoint written; " : "",
              !args.golden_dir ? "not compared (no --golden)" : correct ? "correct" : "INCORRECT against the golden");
  if (g_preempted) return kExitOk;
  return correct ? kExitOk : kExitIncorrect;
}


// A stability run (docs/stability.md): train-tiny trains step after step for `hours` of the run's
// clock while the detectors watch each step's loss and throughput and the chips' error counters,
// read through the driver before each step. A watchdog thread reports a hang when no step ends
// for the criteria's minutes: a call touching a hung chip never returns, as on hardware. The
// result's `stability` object holds what was seen; failures are data, not a crash: the job
// exits 0 once it has written them.
//
// A step stands for kStabilityStepSeconds of a large model's step at the chips' nominal
// throughput (longer when they run slower); the run's clock goes criteria.time_scale times
// faster than the wall clock, so the simulated chip runs hours in seconds.
constexpr double kStabilityStepSeconds = 5.0;

struct StabilityArgs {
  double hours = 0;
  kiln::stability::StabilityCriteria criteria;
};

// What the training loop and its watchdog share, under one lock.
struct StabilityState {
  std::mutex mutex;
  std::condition_variable finished_changed;
  kiln::stability::StabilityMonitor monitor;
  double run_s = 0;  // the run's clock
  double last_step_wall_ms = 0;
  std::optional<std::uint32_t> waiting_on;  // the chip a driver call is waiting on
  bool finished = false;

  explicit StabilityState(const kiln::stability::StabilityCriteria& criteria) : monitor(criteria) {}
};

// Reports a hang when no step ends for the criteria's minutes, from the moment it starts (a
// chip can hang the very binding); `on_hang` writes the result, then the process ends, since
// the training thread is stuck in the driver. Stopped and joined when it goes out of scope.
class Watchdog {
 public:
  Watchdog(StabilityState& state, double time_scale, std::function<bool(double run_hours)> on_hang)
      : state_(state), thread_([this, time_scale, on_hang = std::move(on_hang)] {
          std::unique_lock lock(state_.mutex);
          while (!state_.finished_changed.wait_for(lock, std::chrono::milliseconds(20),
                                                   [&] { return state_.finished; })) {
            // Idle time on the run's clock since the last step ended: a loop that falls behind
            // the wall clock but still makes steps is slow, not hung.
            const double idle_s = (now_epoch_ms() - state_.last_step_wall_ms) / 1000 * time_scale;
            auto& monitor = state_.monitor;
            if (auto hang = monitor.check_progress(monitor.last_step_time_s() + idle_s, state_.waiting_on)) {
              std::fprintf(stderr, "kiln-workload-model: hang: %s\n", hang->detail.c_str());
              std::_Exit(on_hang((state_.run_s + idle_s) / 3600) ? kExitOk : kExitCannotRun);
            }
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(state_.mutex);
      state_.finished = true;
    }
    state_.finished_changed.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  StabilityState& state_;
  std::thread thread_;
};

// The chips' conditions that shape a training step.
struct StepConditions {
  double slowest = 1e9;
  bool throttled = false;
  bool nan_loss = false;
  double spike_factor = 0;
  double decay_per_hour = 0;
};

kiln::Result<StepConditions> step_conditions(const kiln::sim::SimNode& node, const std::vector<std::uint32_t>& chips) {
  StepConditions out;
  for (std::uint32_t chip : chips) {
    auto c = node.conditions(chip);
    if (!c) return tl::unexpected(c.error());
    out.slowest = std::min(out.slowest, c->silicon_factor * c->slow_factor);
    out.throttled = out.throttled || c->throttled;
    out.nan_loss = out.nan_loss || c->nan_loss;
    out.spike_factor = std::max(out.spike_factor, c->loss_spike_factor);
    out.decay_per_hour = std::max(out.decay_per_hour, c->decay_per_hour);
  }
  return out;
}

int run_stability(const JobArgs& args, const StabilityArgs& stability) {
  namespace st = kiln::stability;
  const wl::ModelSpec& spec = *args.spec;
  if (spec.kind != wl::ModelKind::training || spec.name != "train-tiny") {
    return cannot_run(fmt::format("a stability run trains; {} is not a training model the sim can run step by step "
                                  "(use train-tiny)",
                                  spec.name));
  }
  auto job = read_job_env();
  if (!job) return cannot_run(job.error().message);
  const st::StabilityCriteria& criteria = stability.criteria;
  const auto chip_count = static_cast<std::uint32_t>(job->chips.size());
  StabilityState state(criteria);
  const double wall_start_ms = now_epoch_ms();
  state.last_step_wall_ms = wall_start_ms;
  // Called with the lock held.
  const auto write_result = [&](double run_hours) {
    nlohmann::json result = {{"schema", "kiln.workload-result/1"},
                             {"workload", "kiln-workload-model"},
                             {"model", spec.name},
                             {"kind", wl::to_string(spec.kind)},
                             {"dtype", spec.dtype},
                             {"components", spec.components},
                             {"status", "completed"},
                             {"passed", true},
                             {"job", job_json(*job, args.data_seed)},
                             {"benchmark", nullptr},
                             {"correctness", {{"checked", false}, {"passed", true}}},
                             {"stability", st::rank_section(state.monitor, chip_count, run_hours)},
                             {"wall_time_ms", now_epoch_ms() - wall_start_ms}};
    return write_file_atomically(job->result_file, result.dump() + "\n");
  };
  Watchdog watchdog(state, criteria.time_scale, write_result);

  auto driver = kiln::drivers::Driver::load(job->library, job->driver_options);
  if (!driver) return cannot_run(driver.error().message);
  if (auto bound = (*driver)->bind_workload(::getpid(), job->chips); !bound) {  // blocks on a hung chip
    return cannot_run("cannot bind chips: " + bound.error().message);
  }
  auto node = kiln::sim::SimNode::open(job->driver_options);
  if (!node) {
    return cannot_run("the simulated models need the sim driver's node (KILN_DRIVER_OPTIONS): " + node.error().message);
  }
  const double nominal = spec.base_throughput(kiln::sim::to_string(node->revision())) * chip_count;
  wl::ModelRunOptions run_options;
  run_options.data_seed = args.data_seed;
  wl::TinyTrainer trainer(spec, run_options);
  kiln::sim::PerfNoiseModel noise;
  kiln::stats::Rng rng(kiln::stats::derive_seed(job->seed, 0x57AB));

  const double run_limit_s = stability.hours * 3600;
  for (std::uint64_t step = 1; !g_preempted; ++step) {
    {
      std::lock_guard lock(state.mutex);
      if (state.run_s >= run_limit_s || state.monitor.ended()) break;
    }
    std::vector<st::DeviceReading> readings;
    for (std::uint32_t chip : job->chips) {
      {
        std::lock_guard lock(state.mutex);
        state.waiting_on = chip;
      }
      auto telemetry = (*driver)->chip_telemetry(chip);  // never returns from a hung chip
      if (!telemetry) return cannot_run(fmt::format("chip {}: {}", chip, telemetry.error().message));
      readings.push_back({chip, telemetry->ecc_uncorrected, telemetry->link_up});
    }
    auto chips_now = step_conditions(*node, job->chips);
    if (!chips_now) return cannot_run(chips_now.error().message);
    double loss = trainer.step();
    if (chips_now->nan_loss) loss = std::nan("");
    if (chips_now->spike_factor > 0) loss *= kiln::sim::loss_spike_multiplier(chips_now->spike_factor, step);

    std::unique_lock lock(state.mutex);
    state.waiting_on.reset();
    state.monitor.observe_devices(step, state.run_s, readings);
    if (state.monitor.ended()) break;
    const double decay = std::max(0.05, 1 - chips_now->decay_per_hour * state.run_s / 3600);
    const double steady = kiln::sim::steady_throughput(nominal, 1.0, chips_now->slowest, chips_now->throttled) * decay;
    // Past warmup: a stability run is long, its first iterations are no concern of the detectors.
    const double throughput = noise.sample_throughput(steady, noise.warmup_iterations_to_steady, rng);
    state.run_s += kStabilityStepSeconds * nominal / throughput;
    for (const auto& failure : state.monitor.observe_step({step, state.run_s, loss, throughput})) {
      std::fprintf(stderr, "kiln-workload-model: %s at step %llu: %s\n",
                   std::string(kiln::enum_name(failure.kind)).c_str(), static_cast<unsigned long long>(step),
                   failure.detail.c_str());
    }
    state.last_step_wall_ms = now_epoch_ms();
    const double target_ms = wall_start_ms + state.run_s * 1000 / criteria.time_scale;
    lock.unlock();
    sleep_until_epoch_ms(target_ms);
  }
  std::lock_guard lock(state.mutex);
  if (!write_result(state.run_s / 3600)) {
    return cannot_run("cannot write the result file " + job->result_file.string());
  }
  (void)(*driver)->unbind_workload(::getpid());
  std::printf("%s: stability run of %.2f h on %u chips: %zu failure(s)%s\n", spec.name.c_str(), state.run_s / 3600,
              chip_count, state.monitor.failures().size(), state.monitor.ended() ? ", ended early" : "");
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln-workload-model: small real models on the simulated chip (docs/workloads.md)"};
  app.set_version_flag("--version", kiln::version_text("kiln-workload-model"));
  std::string model;
  bool list = false;
  bool json = false;
  std::string write_golden_dir;
  std::string golden_dir;
  std::uint64_t data_seed = 1;
  std::string stack_effects_file;
  std::string baseline_stack_effects_file;
  app.add_option("--model", model, "model to run (see --list)");
  app.add_flag("--list", list, "list the models, their components and base throughput");
  app.add_flag("--json", json, "with --list: as JSON");
  app.add_option("--write-golden", write_golden_dir, "write the fp32 golden reference of --model to this folder");
  app.add_option("--golden", golden_dir, "compare the outputs with the golden in this folder");
  app.add_option("--data-seed", data_seed, "seed of the model's weights and inputs (default 1)");
  app.add_option("--stack-effects", stack_effects_file,
                 "the simulated stack under test (TOML); wins over KILN_SIM_STACK_EFFECTS when both are given");
  double stability_hours = 0;
  std::string stability_criteria;
  app.add_option("--stability-hours", stability_hours,
                 "a stability run (train-tiny): train for this many hours of the run's clock, watching for the "
                 "failures of --stability-criteria (docs/stability.md)");
  app.add_option("--stability-criteria", stability_criteria,
                 "with --stability-hours: the criteria as JSON (what `kiln stability` passes)");
  app.add_option("--baseline-stack-effects", baseline_stack_effects_file,
                 "also benchmark this baseline stack on the same chips, interleaved with the candidate, into "
                 "baseline_benchmark (correctness is judged on the candidate only)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitCannotRun;
  }
  if (list) return list_models(json);
  const wl::ModelSpec* spec = wl::find_model(model);
  if (spec == nullptr) {
    return cannot_run(fmt::format("{} model '{}'; choose one of kiln-workload-model --list",
                                  model.empty() ? "no --model given:" : "unknown", model));
  }
  if (!write_golden_dir.empty()) {
    wl::ModelRunOptions reference;
    reference.reference = true;
    reference.data_seed = data_seed;
    auto run = wl::run_model(*spec, reference);
    if (!run) return cannot_run(run.error().message);
    if (auto written = wl::write_golden(write_golden_dir, *spec, data_seed, *run); !written) {
      return cannot_run(written.error().message);
    }
    std::printf("wrote the fp32 golden of %s (data seed %llu) to %s\n", spec->name.c_str(),
                static_cast<unsigned long long>(data_seed), write_golden_dir.c_str());
    return kExitOk;
  }
  JobArgs args;
  args.spec = spec;
  args.data_seed = data_seed;
  if (!golden_dir.empty()) args.golden_dir = golden_dir;
  if (!stack_effects_file.empty()) args.stack_effects_file = stack_effects_file;
  if (!baseline_stack_effects_file.empty()) args.baseline_stack_effects_file = baseline_stack_effects_file;
  if (stability_hours > 0 || !stability_criteria.empty()) {
    if (!(stability_hours > 0 && stability_hours <= 10000)) {
      return cannot_run("--stability-hours must be in (0, 10000]; give how long the stability run trains");
    }
    const auto json = nlohmann::json::parse(stability_criteria, nullptr, false);
    auto criteria = kiln::stability::criteria_from_json(json);
    if (!criteria) return cannot_run("--stability-criteria: " + criteria.error().message);
    return run_stability(args, StabilityArgs{stability_hours, *criteria});
  }
  return run_job(args);
}
