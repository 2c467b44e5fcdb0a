#include "coordinator/cli/commands/qualification_run.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/protocol/roles.h"
#include "common/stats/rng.h"
#include "coordinator/cli/commands/ticket_sinks.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/cli/text.h"
#include "coordinator/qualification/flake_budget.h"
#include "coordinator/qualification/run.h"
#include "coordinator/qualification/selection.h"
#include "coordinator/qualification/shell/records_client.h"
#include "coordinator/qualification/shell/run_driver.h"
#include "coordinator/qualification/workload_catalog.h"
#include "sim/workloads/catalog.h"

namespace kiln::cli {

namespace fs = std::filesystem;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop.store(true); }

// "nightly-20261130T073412-3dbff4cc": the tier, the time to the second and the bundle.
std::string default_run_id(q::Tier tier, const q::Bundle& candidate, TimeMs now_ms) {
  const std::time_t seconds = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  return fmt::format("{}-{}-{}", q::to_string(tier), stamp, candidate.id.substr(0, 8));
}

// The set, checked against the fleet's workloads: --workload-catalog, else the sim's. Every
// problem with it is one of configuration, whatever the file system said.
Result<q::ModelSet> load_checked_model_set(const RunOptions& options) {
  auto set = q::load_model_set_file(options.model_set_path);
  if (!set) return fail(Errc::config, fmt::format("--model-set: {}", set.error().message));
  Result<q::WorkloadCatalog> catalog = kiln::sim::workloads::sim_workload_catalog();
  if (!options.workload_catalog_path.empty()) catalog = q::load_workload_catalog_file(options.workload_catalog_path);
  if (!catalog) return fail(Errc::config, fmt::format("--workload-catalog: {}", catalog.error().message));
  if (auto ok = q::check_workloads(*set, *catalog); !ok) {
    return fail(Errc::config, fmt::format("{}: {}", options.model_set_path, ok.error().message));
  }
  return set;
}

Status check_golden_dir(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return fail(Errc::config, fmt::format("--golden-dir {} is not a directory; give the directory of the models' "
                                          "golden references (shared with the agents)",
                                          dir));
  }
  if (fs::directory_iterator(dir, error) == fs::directory_iterator()) {
    return fail(Errc::config, fmt::format("--golden-dir {} is empty{}; it must hold the models' golden references",
                                          dir, error ? " or unreadable" : ""));
  }
  return {};
}

// Opens the file for appending (creating it only to remove it again), so nothing is lost.
Status check_writable(const std::string& path, std::string_view option) {
  const bool existed = fs::exists(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(Errc::config, fmt::format("{} {}: cannot write there ({}); give a path in a writable directory",
                                          option, path, std::strerror(errno)));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return {};
}

}  // namespace

Result<q::ModelSet> check_run_locally(const RunOptions& options) {
  for (auto ok : {need(options.model_set_path, "--model-set", "KILN_MODEL_SET",
                       "the qualification set (the demo's is coordinator/qualification/data/qualification-set.toml)"),
                  need(options.builder.bundle_dir, "--bundle-dir", "KILN_BUNDLE_DIR", "the bundle directory"),
                  need(options.golden_dir, "--golden-dir", "KILN_GOLDEN_DIR", "the golden references"),
                  need(options.tickets_dir, "--tickets-dir", "KILN_TICKETS_DIR", "the ticket directory")}) {
    if (!ok) return tl::unexpected(ok.error());
  }
  auto set = load_checked_model_set(options);
  if (!set) return set;
  if (auto ok = check_golden_dir(options.golden_dir); !ok) return tl::unexpected(ok.error());
  if (!options.junit_path.empty()) {
    if (auto ok = check_writable(options.junit_path, "--junit"); !ok) return tl::unexpected(ok.error());
  }
  return set;
}

Status check_run_role(Client& client, q::Tier tier) {
  auto me = expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
  if (!me) return tl::unexpected(me.error());
  for (const auto purpose : {q::JobPurpose::measure, q::JobPurpose::bisect_probe}) {
    const protocol::PriorityClass cls = qs::class_for(purpose, tier);
    if (protocol::role_may_submit(me->role, cls)) continue;
    return fail(Errc::unauthorized,
                fmt::format("{} has role {}, which may not submit {} jobs, and a {} run needs them; run it with a ci "
                            "key (or ask an admin for one)",
                            me->key_name, protocol::enum_name(me->role), protocol::enum_name(cls), q::to_string(tier)));
  }
  return {};
}

namespace {

// Starts the same command again in the background, detached from the terminal, with --wait
// and a fixed run id; its progress goes to the log file.
int run_in_background(const RunOptions& options, const std::string& run_id, int argc, char** argv, bool json) {
  const std::string log = options.log_path.empty() ? fmt::format("kiln-run-{}.log", run_id) : options.log_path;
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return report({Errc::config, fmt::format("cannot open the log {}; pass --log FILE", log)});
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--wait");
  if (options.run_id.empty()) {
    args.push_back("--run-id");
    args.push_back(run_id);
  }
  const pid_t pid = ::fork();
  if (pid < 0) return report({Errc::io, "cannot start the background run (fork failed)"});
  if (pid == 0) {
    ::setsid();
    const int null_fd = ::open("/dev/null", O_RDONLY);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    std::vector<char*> exec_args;
    for (auto& arg : args) exec_args.push_back(arg.data());
    exec_args.push_back(nullptr);
    ::execv("/proc/self/exe", exec_args.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (json) {
    std::cout << nlohmann::json{{"run_id", run_id}, {"pid", pid}, {"log", log}}.dump() << "\n";
  } else {
    std::cout << fmt::format("run {} started in the background (pid {}); follow it with `kiln run {}`; log: {}\n",
                             run_id, pid, run_id, log);
  }
  return kExitOk;
}

// The revisions of the bundle that the fleet has nodes of; the others are skipped, saying so.
Result<std::vector<std::string>> fleet_revisions(Client& client, const q::Bundle& candidate) {
  auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  std::set<std::string> registered;
  for (const auto& node : nodes->nodes) registered.insert(node.hardware_revision);
  std::vector<std::string> revisions;
  for (const auto& revision : candidate.hardware_revisions) {
    if (registered.count(revision)) revisions.push_back(revision);
    else std::cerr << fmt::format("kiln: no node of revision {} is registered; the run skips it\n", revision);
  }
  if (revisions.empty()) {
    return fail(Errc::unavailable, fmt::format("no registered node has any of the bundle's revisions ({}); start "
                                               "agents of those revisions",
                                               fmt::join(candidate.hardware_revisions, ", ")));
  }
  return revisions;
}

// The models the tier runs: smoke, those the change touches; the others, the set (or its first N).
Result<std::vector<q::QualificationModel>> tier_models(const RunOptions& options, q::Tier tier,
                                                       const q::ModelSet& set, const q::Bundle& candidate,
                                                       const std::vector<q::Change>& history) {
  if (tier != q::Tier::smoke) {
    std::vector<q::QualificationModel> models = set.models;
    if (options.max_models > 0 && models.size() > options.max_models) models.resize(options.max_models);
    return models;
  }
  const std::string change_id = options.change.empty() ? candidate.change_ids.back() : options.change;
  auto change = std::find_if(history.begin(), history.end(), [&](const q::Change& ch) { return ch.id == change_id; });
  if (change == history.end()) {
    return fail(Errc::not_found, fmt::format("change {} is not recorded; `kiln changes` lists them", change_id));
  }
  q::PresubmitOptions presubmit;
  presubmit.max_models = options.max_models == 0 ? set.models.size() : options.max_models;
  std::vector<q::QualificationModel> models;
  for (const auto& picked : q::select_presubmit(*change, set, presubmit)) models.push_back(*set.find(picked.name));
  return models;
}

Result<q::RunInput> run_input(const RunOptions& options, q::Tier tier, const q::ModelSet& set,
                              const q::Bundle& candidate, const std::string& run_id, Client& client) {
  auto history = qs::list_changes(client);
  if (!history) return tl::unexpected(history.error());
  auto baselines = qs::list_baselines(client);
  if (!baselines) return tl::unexpected(baselines.error());
  auto revisions = fleet_revisions(client, candidate);
  if (!revisions) return tl::unexpected(revisions.error());
  q::RunInput input;
  input.candidate = candidate;
  input.set = set;
  input.history = *history;
  auto& settings = input.settings;
  settings.tier = tier;
  settings.run_id = run_id;
  settings.repeats_per_side = options.repeats;
  settings.repeats_multiplier = tier == q::Tier::release ? 2 : 1;
  settings.max_jobs_in_flight = options.max_jobs;
  settings.seed = stats::stable_hash(run_id);
  settings.revisions = *revisions;
  for (const auto& revision : settings.revisions) {
    auto it = baselines->find(revision);
    if (it == baselines->end() || it->second.bundle_id == candidate.id) continue;
    auto baseline = qs::find_bundle(client, it->second.bundle_id);
    if (!baseline) return tl::unexpected(baseline.error());
    input.baselines[revision] = *baseline;
  }
  auto models = tier_models(options, tier, set, candidate, *history);
  if (!models) return tl::unexpected(models.error());
  input.models = std::move(*models);
  return input;
}

// What a run needs while it is driven: the driver's options, its sink and its builder.
struct Driving {
  qs::DriverOptions options;
  std::unique_ptr<q::TicketSink> sink;
  std::unique_ptr<qs::BundleBuilder> builder;
};

// The release's stability soak: the whole set again, correctness only, round after round on
// whatever nodes are free; a failure anywhere is triaged like any other and fails the release.
Status soak(const RunOptions& options, const q::RunInput& first, const q::ModelSet& set, Client& client,
            Driving& driving, q::RunReport& run_report) {
  for (std::uint32_t round = 1; round <= options.soak_rounds && run_report.passed; ++round) {
    q::RunInput again = first;
    again.settings.run_id = fmt::format("{}-soak{}", first.settings.run_id, round);
    again.settings.seed = stats::stable_hash(again.settings.run_id);
    auto soak_run = q::QualificationRun::start(std::move(again), wall_now_ms());
    if (!soak_run) return tl::unexpected(soak_run.error());
    std::cerr << fmt::format("run {}: stability soak round {} of {}\n", first.settings.run_id, round,
                             options.soak_rounds);
    auto soaked = qs::drive_run(client, *soak_run, set, first.history, *driving.builder, *driving.sink,
                                driving.options);
    if (!soaked) return tl::unexpected(soaked.error());
    for (auto model : soaked->models) {
      model.detail = fmt::format("soak round {}: {}", round, model.detail);
      run_report.models.push_back(std::move(model));
    }
    run_report.tickets.insert(run_report.tickets.end(), soaked->tickets.begin(), soaked->tickets.end());
    run_report.jobs_started += soaked->jobs_started;
    run_report.passed = soaked->passed;
    run_report.finished_at_ms = soaked->finished_at_ms;
  }
  nlohmann::json document = q::to_json(run_report);
  document["summary"] = q::summary_text(run_report);
  return qs::record_run(client, first.settings.run_id, document);
}

Result<q::RunReport> drive(const RunOptions& options, const q::RunInput& input, const q::ModelSet& set,
                           Client& client, Driving& driving) {
  auto run = q::QualificationRun::start(q::RunInput(input), wall_now_ms());
  if (!run) return tl::unexpected(run.error());
  const auto& settings = input.settings;
  std::cerr << fmt::format("run {}: {} of bundle {} on revision{} {}, {} model runs\n", settings.run_id,
                           q::to_string(settings.tier), short_id(input.candidate.id),
                           settings.revisions.size() == 1 ? "" : "s", fmt::join(settings.revisions, ", "),
                           run->report().models.size());
  auto outcome = qs::drive_run(client, *run, set, input.history, *driving.builder, *driving.sink, driving.options);
  if (!outcome) return outcome;
  if (settings.tier == q::Tier::release && outcome->passed && options.soak_rounds > 0) {
    if (auto ok = soak(options, input, set, client, driving, *outcome); !ok) return tl::unexpected(ok.error());
  }
  return outcome;
}

// After the verdict: flaky tests over budget get tickets, the JUnit file, the new baseline.
Status finish(const RunOptions& options, const q::RunInput& input, const q::RunReport& run_report, Client& client,
              q::TicketSink& sink) {
  if (auto runs = qs::list_runs(client); runs) {
    for (const auto& ticket : q::flake_budget_tickets(q::flake_ledger_from_reports(*runs), wall_now_ms())) {
      if (auto filed = sink.file(ticket); filed && *filed == q::FileResult::filed) {
        std::cerr << fmt::format("ticket {} to {}: {}\n", ticket.id, ticket.team, ticket.title);
      }
    }
  }
  if (!options.junit_path.empty()) {
    std::ofstream out(options.junit_path, std::ios::trunc);
    out << q::to_junit_xml(run_report);
    if (!out) return fail(Errc::io, fmt::format("cannot write {}; check the path", options.junit_path));
  }
  const auto& settings = input.settings;
  if (!run_report.passed || settings.tier == q::Tier::smoke || options.no_accept) return {};
  for (const auto& revision : settings.revisions) {
    if (auto ok = qs::accept_baseline(client, {revision, input.candidate.id, settings.run_id, wall_now_ms()}); !ok) {
      return ok;
    }
  }
  std::cerr << fmt::format("bundle {} is now the baseline of {}\n", short_id(input.candidate.id),
                           fmt::join(settings.revisions, ", "));
  return {};
}

}  // namespace

int run_qualification(const RunOptions& options, q::Tier tier, const q::ModelSet& set, Client& client, bool json,
                      int argc, char** argv) {
  auto candidate = qs::find_bundle(client, options.bundle);
  if (!candidate) return report(candidate.error());
  const std::string run_id = !options.run_id.empty() ? options.run_id : default_run_id(tier, *candidate, wall_now_ms());
  if (!options.wait) return run_in_background(options, run_id, argc, argv, json);

  auto input = run_input(options, tier, set, *candidate, run_id, client);
  if (!input) return report(input.error());
  Driving driving;
  auto sink = open_ticket_sink(options.tickets_dir, options.webhook_config);
  if (!sink) return report(sink.error());
  driving.sink = std::move(*sink);
  driving.builder = configured_builder(options.builder, candidate->hardware_revisions);
  driving.options.bundle_dir = options.builder.bundle_dir;
  driving.options.golden_dir = options.golden_dir;
  driving.options.progress = &std::cerr;
  driving.options.stop = &g_stop;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  auto run_report = drive(options, *input, set, client, driving);
  if (!run_report) return report(run_report.error());
  if (auto ok = finish(options, *input, *run_report, client, *driving.sink); !ok) return report(ok.error());
  if (json) std::cout << q::to_json(*run_report).dump(2) << "\n";
  else std::cout << q::summary_text(*run_report);
  return run_report->passed ? kExitOk : kExitFailed;
}

}  // namespace kiln::cli
