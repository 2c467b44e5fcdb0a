#include "agent/health/diagnostics.h"

#include <poll.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/health/evaluate.h"
#include "common/process/process_runner.h"

namespace kiln::agent::health {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// How much of a helper's output to keep: one reading line plus any backend chatter.
constexpr std::size_t kHelperOutputLimitBytes = 256 * 1024;
// How long one wait for a finished check lasts; the runner enforces the real deadlines.
constexpr int kPollIntervalMs = 1000;
// Key of node-wide checks in the per-chip queues; never a chip index.
constexpr std::uint32_t kNodeKey = UINT32_MAX;

TimeMs wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string program_beside_executable(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return name;
  return (self.parent_path() / name).string();
}

std::string resolve_work_dir(const AgentConfig& config, const DiagOptions& options) {
  if (!options.work_dir.empty()) return options.work_dir;
  if (!config.work_dir.empty()) return (fs::path(config.work_dir) / "health").string();
  return (fs::temp_directory_path() / ("kiln-health-" + std::to_string(::getuid()))).string();
}

Status check_helper(const std::string& program) {
  if (program.empty() || program.front() != '/') {
    return fail(Errc::invalid_argument, "the health check helper path '" + program +
                                            "' is not absolute; give the full path of "
                                            "kiln-agent-check");
  }
  if (::access(program.c_str(), X_OK) != 0) {
    return fail(Errc::not_found, "the health check helper '" + program +
                                     "' is missing or not executable; reinstall kiln (it ships "
                                     "kiln-agent-check beside kiln-agent)");
  }
  return {};
}

struct Context {
  const AgentConfig& config;
  const DiagOptions& options;
  std::string program;
  std::string work_dir;
};

ProcessSpec spec_for(const Context& context, const PlannedCheck& check) {
  ProcessSpec spec;
  spec.program = context.program;
  // --name=value, so a value starting with '-' is never taken for an option.
  spec.args = {"--driver=" + context.config.driver_library_path,
               "--check=" + std::string(to_string(check.kind)),
               "--level=" + std::to_string(check.self_test_level)};
  // CLI11 reads an empty "--options=" as a missing value; absent means empty.
  if (!context.config.driver_options.empty()) {
    spec.args.push_back("--options=" + context.config.driver_options);
  }
  if (check.chip) spec.args.push_back("--chip=" + std::to_string(*check.chip));
  spec.work_dir = context.work_dir;
  spec.timeout_ms = check.timeout_ms;
  spec.kill_grace_ms = context.options.kill_grace_ms;
  spec.output_limit_bytes = kHelperOutputLimitBytes;
  return spec;
}

std::string last_chars(const std::string& text, std::size_t count) {
  return text.size() <= count ? text : "..." + text.substr(text.size() - count);
}

std::vector<CheckResult> interpret(const Context& context, const PlannedCheck& check,
                                   const ProcessExit& exit) {
  std::vector<CheckResult> results;
  switch (exit.outcome) {
    case ProcessOutcome::timed_out:
      return {timed_out_result(check.kind, check.chip, check.timeout_ms)};
    case ProcessOutcome::failed_to_start:
    case ProcessOutcome::cancelled:
      return {crashed_result(check.kind, check.chip, exit.detail)};
    case ProcessOutcome::exited: break;
  }
  auto reading = find_reading(exit.output_tail);
  if (!reading || !exit.succeeded()) {
    std::string detail = exit.detail;
    if (!reading) detail += "; " + reading.error().message;
    const std::string tail = last_chars(exit.output_tail, 400);
    if (!tail.empty()) detail += "; output: " + tail;
    return {crashed_result(check.kind, check.chip, detail)};
  }
  results = evaluate_reading(*reading, context.options.targets,
                             context.config.hardware_revision_override);
  for (auto& result : results) result.duration_s = static_cast<double>(exit.duration_ms) / 1000.0;
  return results;
}

// A check as a person waiting on it reads it.
std::string describe(const PlannedCheck& check) {
  switch (check.kind) {
    case CheckKind::driver: return "driver check";
    case CheckKind::chip_firmware: return "firmware read";
    case CheckKind::telemetry: return "telemetry probe";
    case CheckKind::memory:
    case CheckKind::interconnect:
    case CheckKind::compute: return fmt::format("{} self-test (level {})", to_string(check.kind), check.self_test_level);
  }
  return std::string(to_string(check.kind));
}

// Runs the planned checks, each in its own helper process under its deadline: up to
// max_parallel_checks at once, never two on one chip (their figures would disturb each
// other), and none after a check on the same chip timed out (it is wedged: waiting out every
// deadline would only delay the verdict). `ended` gets each plan index with its helper's
// exit, or nullptr for a check not run because its chip is wedged.
Status run_helpers(const Context& context, const std::vector<PlannedCheck>& plan,
                   const std::function<void(std::size_t, const ProcessExit*)>& ended) {
  ProcessRunner runner;
  std::map<std::uint32_t, std::deque<std::size_t>> pending;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    pending[plan[i].chip.value_or(kNodeKey)].push_back(i);
  }
  std::map<ProcessId, std::size_t> running;
  std::set<std::uint32_t> busy;
  std::set<std::uint32_t> wedged;
  const std::size_t parallel = std::max<std::size_t>(1, context.options.max_parallel_checks);
  std::size_t done = 0;
  const auto tell = [&] {
    if (!context.options.progress) return;
    DiagProgress progress{done, plan.size(), {}, 0};
    for (const auto& [id, index] : running) {
      const PlannedCheck& check = plan[index];
      progress.running.push_back(check.chip ? fmt::format("{} on chip {}", describe(check), *check.chip)
                                            : describe(check));
      progress.longest_deadline_ms = std::max(progress.longest_deadline_ms, check.timeout_ms);
    }
    context.options.progress(progress);
  };
  const auto finished = [&](std::size_t index, const ProcessExit* exit) {
    ++done;
    ended(index, exit);
  };

  for (;;) {
    for (auto& [key, queue] : pending) {
      if (busy.count(key) > 0) continue;
      while (!queue.empty() && running.size() < parallel) {
        const std::size_t index = queue.front();
        queue.pop_front();
        const PlannedCheck& check = plan[index];
        if (wedged.count(key) > 0) {
          finished(index, nullptr);
          continue;
        }
        auto id = runner.start(spec_for(context, check));
        if (!id) {
          return fail(id.error().code, "cannot start the " + std::string(to_string(check.kind)) +
                                           " health check: " + id.error().message);
        }
        running[*id] = index;
        busy.insert(key);
        tell();
        break;
      }
    }
    if (running.empty()) {
      bool left = false;
      for (const auto& [key, queue] : pending) left = left || !queue.empty();
      if (!left) break;
      continue;
    }
    pollfd wakeup{runner.wakeup_fd(), POLLIN, 0};
    ::poll(&wakeup, 1, kPollIntervalMs);
    for (const ProcessExit& exit : runner.poll_finished()) {
      auto it = running.find(exit.id);
      KILN_ASSERT(it != running.end(), "every finished process was started here");
      const std::size_t index = it->second;
      running.erase(it);
      const std::uint32_t key = plan[index].chip.value_or(kNodeKey);
      busy.erase(key);
      if (exit.outcome == ProcessOutcome::timed_out) wedged.insert(key);
      finished(index, &exit);
      tell();
      if (!exit.output_path.empty()) {
        std::error_code ignored;
        fs::remove(exit.output_path, ignored);
      }
    }
  }
  return {};
}

// Results come back in plan order.
Result<std::vector<CheckResult>> run_checks(const Context& context,
                                            const std::vector<PlannedCheck>& plan) {
  std::vector<std::vector<CheckResult>> by_plan(plan.size());
  auto ran = run_helpers(context, plan, [&](std::size_t index, const ProcessExit* exit) {
    const PlannedCheck& check = plan[index];
    by_plan[index] = exit != nullptr
                         ? interpret(context, check, *exit)
                         : std::vector<CheckResult>{skipped_result(
                               check.kind, check.chip, "chip_unresponsive",
                               "not run: an earlier check on this chip timed out")};
  });
  if (!ran) return tl::unexpected(ran.error());
  std::vector<CheckResult> out;
  for (auto& results : by_plan) {
    for (auto& result : results) out.push_back(std::move(result));
  }
  return out;
}

// The raw reading of one helper run, or why there is none.
Result<CheckReading> reading_of(const PlannedCheck& check, const ProcessExit& exit) {
  const std::string what = check.chip ? "chip " + std::to_string(*check.chip)
                                      : std::string("the driver");
  if (exit.outcome == ProcessOutcome::timed_out) {
    return fail(Errc::timeout, what + " did not answer within " +
                                   std::to_string(check.timeout_ms) +
                                   " ms: it may be wedged; reset it, or drain the node for "
                                   "the lab");
  }
  auto reading = find_reading(exit.output_tail);
  if (!reading || !exit.succeeded()) {
    return fail(Errc::device, "reading " + what + " failed: " + exit.detail +
                                  (reading ? std::string() : "; " + reading.error().message));
  }
  if (reading->error) return tl::unexpected(*reading->error);
  return reading;
}

Result<Context> make_context(const AgentConfig& config, const DiagOptions& options) {
  Context context{config, options,
                  options.check_program.empty() ? program_beside_executable("kiln-agent-check")
                                                : options.check_program,
                  resolve_work_dir(config, options)};
  if (auto ok = check_helper(context.program); !ok) return tl::unexpected(ok.error());
  return context;
}

PlannedCheck driver_check(const DiagOptions& options) {
  return PlannedCheck{CheckKind::driver, std::nullopt, 1, options.quick_check_timeout_ms};
}

// The driver check's chip count, or nullopt when the driver did not load.
std::optional<std::uint32_t> chip_count_of(const std::vector<CheckResult>& driver_results) {
  for (const auto& result : driver_results) {
    if (result.check != "driver" || result.status != CheckStatus::pass) continue;
    auto it = result.measured.find("chip_count");
    if (it != result.measured.end()) return static_cast<std::uint32_t>(it->second);
  }
  return std::nullopt;
}

// What the driver check says the backend is: "sim", "cpu", "silicon", or "" when it does not say.
std::string declared_backend(const std::vector<CheckResult>& driver_results) {
  for (const auto& result : driver_results) {
    if (result.check != "driver") continue;
    auto it = result.attributes.find("backend");
    if (it != result.attributes.end()) return it->second;
  }
  return "";
}

std::vector<WorkloadProgram> inspect_workloads(const AgentConfig& config) {
  std::vector<WorkloadProgram> out;
  for (const auto& [name, path] : config.workloads) {
    WorkloadProgram program{name, path, false, false};
    std::error_code ec;
    program.exists = fs::is_regular_file(path, ec);
    program.executable = program.exists && ::access(path.c_str(), X_OK) == 0;
    out.push_back(program);
  }
  return out;
}

void append(std::vector<CheckResult>& to, std::vector<CheckResult> from) {
  for (auto& result : from) to.push_back(std::move(result));
}

}  // namespace

Result<DiagOptions> default_diag_options(const AgentConfig& config) {
  DiagOptions options;
  if (!config.config_path.empty()) {
    const fs::path targets_file = fs::path(config.config_path).parent_path() / "health-targets.toml";
    std::error_code ec;
    if (fs::exists(targets_file, ec)) {
      auto targets = load_health_targets(targets_file.string());
      if (!targets) return tl::unexpected(targets.error());
      options.targets = std::move(*targets);
    }
  }
  if (config.knobs.probe_timeout_ms > 0) {
    options.quick_check_timeout_ms = config.knobs.probe_timeout_ms;
  }
  return options;
}

std::vector<PlannedCheck> plan_chip_checks(int level, std::uint32_t chip_count,
                                           const DiagOptions& options) {
  std::vector<PlannedCheck> plan;
  for (std::uint32_t chip = 0; chip < chip_count; ++chip) {
    if (level >= 1) {
      plan.push_back({CheckKind::chip_firmware, chip, 1, options.quick_check_timeout_ms});
    }
    plan.push_back({CheckKind::telemetry, chip, 1, options.quick_check_timeout_ms});
    if (level >= 2) {
      plan.push_back({CheckKind::memory, chip, 2, options.self_test_timeout_ms[1]});
      plan.push_back({CheckKind::interconnect, chip, 2, options.self_test_timeout_ms[1]});
    }
    if (level >= 3) {
      plan.push_back({CheckKind::compute, chip, 3, options.self_test_timeout_ms[2]});
    }
  }
  return plan;
}

Result<DiagReport> run_diagnostics(const AgentConfig& config, int level,
                                   const DiagOptions& options) {
  if (level < kMinDiagLevel || level > kMaxDiagLevel) {
    return fail(Errc::invalid_argument, "diagnostics level " + std::to_string(level) +
                                            " does not exist; use 1 (seconds), 2 (about a "
                                            "minute) or 3 (long stress)");
  }
  auto context = make_context(config, options);
  if (!context) return tl::unexpected(context.error());

  DiagReport report;
  report.level = level;
  report.node = config.node_id;
  report.started_at_ms = wall_clock_ms();

  auto driver_results = run_checks(*context, {driver_check(options)});
  if (!driver_results) return tl::unexpected(driver_results.error());
  const auto chip_count = chip_count_of(*driver_results);
  append(report.results, std::move(*driver_results));
  if (chip_count) {
    report.results.push_back(evaluate_chip_count(*chip_count, options.targets.expected_chip_count));
  } else {
    report.results.push_back(skipped_result(CheckKind::driver, std::nullopt, "driver_unavailable",
                                            "chip checks not run: the driver did not load"));
    report.results.back().check = "chip_count";
    report.results.back().category = category::config;
  }
  report.results.push_back(evaluate_workloads(inspect_workloads(config)));

  if (chip_count) {
    auto chip_results = run_checks(*context, plan_chip_checks(level, *chip_count, options));
    if (!chip_results) return tl::unexpected(chip_results.error());
    append(report.results, std::move(*chip_results));
    report.results.push_back(evaluate_firmware_consistency(report.results));
    report.results.push_back(evaluate_revision_consistency(report.results));
  }

  if (config.hardware_revision_override) {
    report.revision = *config.hardware_revision_override;
  } else {
    for (const auto& result : report.results) {
      auto it = result.attributes.find("hardware_revision");
      if (it != result.attributes.end()) {
        report.revision = it->second;
        break;
      }
    }
  }
  report.verdict = verdict(report.results);
  report.finished_at_ms = wall_clock_ms();
  return report;
}

Result<NodeIdentityReading> read_node_identity(const AgentConfig& config,
                                               const DiagOptions& options) {
  auto context = make_context(config, options);
  if (!context) return tl::unexpected(context.error());
  const std::vector<PlannedCheck> driver_plan{driver_check(options)};
  Result<CheckReading> driver = fail(Errc::internal, "the driver check did not run");
  auto ran = run_helpers(*context, driver_plan, [&](std::size_t, const ProcessExit* exit) {
    if (exit != nullptr) driver = reading_of(driver_plan.front(), *exit);
  });
  if (!ran) return tl::unexpected(ran.error());
  if (!driver) return tl::unexpected(driver.error());
  if (!driver->driver) return fail(Errc::device, "the driver check reported no driver version");
  NodeIdentityReading node;
  node.driver = *driver->driver;
  std::vector<PlannedCheck> chip_plan;
  for (std::uint32_t chip = 0; chip < node.driver.chip_count; ++chip) {
    chip_plan.push_back(
        PlannedCheck{CheckKind::chip_firmware, chip, 1, options.quick_check_timeout_ms});
  }
  node.chips.assign(chip_plan.size(), fail(Errc::internal, "not read"));
  ran = run_helpers(*context, chip_plan, [&](std::size_t index, const ProcessExit* exit) {
    if (exit != nullptr) node.chips[index] = reading_of(chip_plan[index], *exit);
  });
  if (!ran) return tl::unexpected(ran.error());
  return node;
}

Result<std::vector<CheckResult>> run_probes(const AgentConfig& config,
                                            const DiagOptions& options) {
  auto context = make_context(config, options);
  if (!context) return tl::unexpected(context.error());
  auto results = run_checks(*context, {driver_check(options)});
  if (!results) return tl::unexpected(results.error());
  if (auto chip_count = chip_count_of(*results)) {
    std::vector<PlannedCheck> plan;
    for (const PlannedCheck& check : plan_chip_checks(0, *chip_count, options)) {
      if (check.chip && options.unprobed_chips.count(*check.chip) > 0) {
        results->push_back(skipped_result(check.kind, check.chip, "chip_unhealthy",
                                          "not probed: the agent reported this chip unhealthy "
                                          "because it did not answer at start-up; restart the "
                                          "agent once it is reset or repaired"));
      } else {
        plan.push_back(check);
      }
    }
    auto probes = run_checks(*context, plan);
    if (!probes) return tl::unexpected(probes.error());
    append(*results, std::move(*probes));
    if (auto none = evaluate_no_healthy_chip(*chip_count, options.unprobed_chips)) results->push_back(*none);
  }
  // On a CPU node the host is the chip: its cores and memory are its health too.
  if (declared_backend(*results) == "cpu") append(*results, evaluate_host(drivers::cpu::read_host("/")));
  return results;
}

int run_diag_command(const AgentConfig& config, int level, bool json_output, std::ostream& out,
                     std::ostream& err, const std::function<void(const DiagProgress&)>& progress) {
  auto options = default_diag_options(config);
  if (!options) {
    err << "kiln-agent diag: " << options.error().describe() << "\n";
    return 2;
  }
  options->progress = progress;
  auto report = run_diagnostics(config, level, *options);
  if (!report) {
    err << "kiln-agent diag: " << report.error().describe() << "\n";
    return 2;
  }
  out << (json_output ? format_diag_json(*report) : format_diag_text(*report));
  switch (report->verdict) {
    case CheckStatus::pass:
    case CheckStatus::warn: return 0;
    case CheckStatus::fail: return 1;
    case CheckStatus::skip: break;  // nothing could be checked: not a pass
  }
  return 2;
}

}  // namespace kiln::agent::health
