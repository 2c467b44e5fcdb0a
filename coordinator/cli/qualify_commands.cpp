#include "coordinator/cli/qualify_commands.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "common/config/toml_errors.h"
#include "common/stats/rng.h"
#include "coordinator/cli/client.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/qualification/flake_budget.h"
#include "coordinator/qualification/model_set.h"
#include "coordinator/qualification/run.h"
#include "coordinator/qualification/selection.h"
#include "coordinator/qualification/shell/bundle_builder.h"
#include "coordinator/qualification/shell/records_client.h"
#include "coordinator/qualification/shell/run_driver.h"
#include "coordinator/qualification/ticket.h"
#include "coordinator/qualification/webhook_sink.h"
#include "coordinator/qualification/workload_catalog.h"
#include "sim/workloads/catalog.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string time_text(TimeMs ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &tm);
  return text;
}

std::string short_id(const std::string& id) { return id.substr(0, 12); }

// "nightly-20261130T073412-3dbff4cc": the tier, the time to the second and the bundle.
std::string default_run_id(q::Tier tier, const q::Bundle& candidate, TimeMs now_ms) {
  const std::time_t seconds = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  return fmt::format("{}-{}-{}", q::to_string(tier), stamp, candidate.id.substr(0, 8));
}

std::atomic<bool> g_stop{false};
void on_stop_signal(int) { g_stop.store(true); }

}  // namespace

struct QualifyCommands {
  // kiln change add / import
  CLI::App* change = nullptr;
  CLI::App* change_add = nullptr;
  CLI::App* change_import = nullptr;
  q::Change new_change;
  std::string new_change_layer;
  std::string import_file;
  CLI::App* changes = nullptr;

  // kiln bundle build / accept / show, kiln bundles
  CLI::App* bundle = nullptr;
  CLI::App* bundle_build = nullptr;
  CLI::App* bundle_accept = nullptr;
  CLI::App* bundle_show = nullptr;
  std::string build_at;
  std::vector<std::string> build_revisions = {"a", "b"};
  std::string builder_program;  // empty: the sim builder; also the run commands' bisection builds
  std::vector<std::string> builder_args;
  std::string bundle_id;
  std::vector<std::string> accept_revisions;
  CLI::App* bundles = nullptr;

  // kiln smoke / nightly / qualify-release
  CLI::App* smoke = nullptr;
  CLI::App* nightly = nullptr;
  CLI::App* release = nullptr;
  std::string run_bundle;
  std::string smoke_change;
  std::string model_set_path;
  std::string workload_catalog_path;  // empty: the sim's workloads
  std::string bundle_dir;
  std::string golden_dir;
  std::string tickets_dir;
  std::string junit_path;
  std::string webhook_config;
  std::uint32_t soak_rounds = 2;
  std::string run_id;
  std::string log_path;
  bool wait = false;
  bool no_accept = false;
  std::uint32_t repeats = 10;
  std::size_t max_jobs = 32;
  std::size_t max_models = 0;  // 0: all the tier selects
  std::size_t smoke_models = 4;

  // kiln runs, kiln run ID, kiln tickets
  CLI::App* runs = nullptr;
  CLI::App* run = nullptr;
  std::string show_run_id;
  CLI::App* tickets = nullptr;
};

void QualifyCommandsDeleter::operator()(QualifyCommands* commands) const { delete commands; }

namespace {

// The same builder makes `kiln bundle build`'s bundles and a run's bisection bundles.
void add_builder_options(CLI::App* command, QualifyCommands& c) {
  command->add_option("--builder", c.builder_program,
                      "a program that builds the bundle and prints it as JSON (default: $KILN_BUILDER, else the "
                      "sim builder)");
  command->add_option("--builder-arg", c.builder_args, "an argument for it; {change}, {index} and {out} are replaced");
}

void add_run_options(CLI::App* command, QualifyCommands& c) {
  command->add_option("--bundle", c.run_bundle, "the candidate bundle (id or unique prefix; kiln bundles)")->required();
  command->add_option("--model-set", c.model_set_path, "the qualification set (TOML; default: $KILN_MODEL_SET)");
  command->add_option("--workload-catalog", c.workload_catalog_path,
                      "the fleet's workloads and their kernels, as JSON (kiln-workload-model --list --json prints "
                      "the sim's); the set's workloads and components are checked against it (default: "
                      "$KILN_WORKLOAD_CATALOG, else the sim's)");
  add_builder_options(command, c);
  command->add_option("--bundle-dir", c.bundle_dir,
                      "where the bundles' stack files are (shared with the agents; default: $KILN_BUNDLE_DIR)");
  command->add_option("--golden-dir", c.golden_dir,
                      "the models' golden references (shared with the agents; default: $KILN_GOLDEN_DIR)");
  command->add_option("--tickets-dir", c.tickets_dir,
                      "the ticket sink: one JSON file per ticket (default: $KILN_TICKETS_DIR)");
  command->add_flag("--wait", c.wait, "run in the foreground until the verdict; the exit code is the verdict");
  command->add_option("--junit", c.junit_path, "write the verdict as JUnit XML here");
  command->add_option("--webhook-config", c.webhook_config,
                      "send tickets to an HTTP webhook (TOML: url, headers, bearer_token_file, timeout_ms, "
                      "max_attempts, retry_backoff_ms); the tickets directory keeps the record (default: "
                      "$KILN_WEBHOOK_CONFIG)");
  command->add_option("--repeats", c.repeats, "timed repeats per side in the first measurement")->capture_default_str();
  command->add_option("--max-jobs", c.max_jobs, "jobs in flight at once")->capture_default_str();
  command->add_option("--run-id", c.run_id, "name of the run (default: tier, time and bundle)");
  command->add_option("--log", c.log_path, "without --wait: where the background run writes its progress");
}

QualifyCommands* make(CLI::App& app) {
  auto* c = new QualifyCommands;
  c->change = app.add_subcommand("change", "record merged changes: add one, or import a history file");
  c->change->require_subcommand(1);
  c->change_add = c->change->add_subcommand("add", "record one merged change");
  c->change_add->add_option("--id", c->new_change.id, "the change's id (commit)")->required();
  c->change_add->add_option("--layer", c->new_change_layer,
                            "model, framework, compiler, kernels, runtime, driver or firmware")
      ->required();
  c->change_add->add_option("--owner", c->new_change.owner_team, "the team that owns it (gets its tickets)")
      ->required();
  c->change_add->add_option("--components", c->new_change.components, "what it touched: kernels, or model names")
      ->delimiter(',');
  c->change_add->add_option("--summary", c->new_change.summary, "one line");
  c->change_add->add_option("--merged-at-ms", c->new_change.merged_at_ms, "merge time (default: now)");
  c->change_import = c->change->add_subcommand("import", "record every change of a history file ([[change]] TOML)");
  c->change_import->add_option("FILE", c->import_file, "the history, in merge order")->required();
  c->changes = app.add_subcommand("changes", "list the recorded changes in merge order");

  c->bundle = app.add_subcommand("bundle", "build, show and accept stack bundles");
  c->bundle->require_subcommand(1);
  c->bundle_build = c->bundle->add_subcommand("build", "build the bundle at a change (default: the latest)");
  c->bundle_build->add_option("--at", c->build_at, "the last change the bundle contains");
  c->bundle_build->add_option("--revs", c->build_revisions, "hardware revisions it supports")
      ->delimiter(',')
      ->capture_default_str();
  c->bundle_build->add_option("--bundle-dir", c->bundle_dir,
                              "where the sim builder writes the stack file (default: $KILN_BUNDLE_DIR)");
  add_builder_options(c->bundle_build, *c);
  c->bundle_show = c->bundle->add_subcommand("show", "print one bundle");
  c->bundle_show->add_option("ID", c->bundle_id, "bundle id or unique prefix")->required();
  c->bundle_accept = c->bundle->add_subcommand("accept", "make a bundle the baseline of its revisions");
  c->bundle_accept->add_option("ID", c->bundle_id, "bundle id or unique prefix")->required();
  c->bundle_accept->add_option("--rev", c->accept_revisions, "only these revisions")->delimiter(',');
  c->bundles = app.add_subcommand("bundles", "list the bundles and the accepted baseline per revision");

  c->smoke = app.add_subcommand("smoke", "presubmit smoke of a bundle: the models its change touches, on every "
                                          "revision; exit 0 pass, 1 fail");
  add_run_options(c->smoke, *c);
  c->smoke->add_option("--change", c->smoke_change, "the change under test (default: the bundle's last)");
  c->smoke->add_option("--models", c->smoke_models, "at most this many models")->capture_default_str();
  c->nightly = app.add_subcommand("nightly", "the whole qualification set against the accepted baselines; "
                                              "regressions are confirmed, bisected and ticketed");
  add_run_options(c->nightly, *c);
  c->nightly->add_flag("--no-accept", c->no_accept, "do not make a passing bundle the new baseline");
  c->nightly->add_option("--max-models", c->max_models, "only the first N models of the set (0: all)");
  c->release = app.add_subcommand("qualify-release", "release qualification: the whole set with twice the repeats, "
                                                     "training curves and evals, on every revision");
  add_run_options(c->release, *c);
  c->release->add_flag("--no-accept", c->no_accept, "do not make a passing bundle the new baseline");
  c->release->add_option("--soak-rounds", c->soak_rounds,
                         "stability soak: after the comparison, run the whole set this many more times across "
                         "the fleet; any failure fails the release")
      ->capture_default_str();
  c->release->add_option("--max-models", c->max_models, "only the first N models of the set (0: all)");

  c->runs = app.add_subcommand("runs", "list qualification runs and their verdicts");
  c->run = app.add_subcommand("run", "show one qualification run (progress while it runs)");
  c->run->add_option("ID", c->show_run_id, "run id")->required();
  c->tickets = app.add_subcommand("tickets", "list the tickets in the ticket directory");
  c->tickets->add_option("--tickets-dir", c->tickets_dir, "the ticket sink's directory (default: $KILN_TICKETS_DIR)");
  return c;
}

// A directory or file the command needs: given by its option or its variable.
Status need(const std::string& value, std::string_view option, std::string_view variable, std::string_view what) {
  if (!value.empty()) return {};
  return fail(Errc::invalid_argument, fmt::format("say where {} is: {} PATH, or set {}", what, option, variable));
}

// The configured builder (--builder), else the sim builder for these revisions.
std::unique_ptr<qs::BundleBuilder> configured_builder(const QualifyCommands& c, std::vector<std::string> revisions) {
  if (c.builder_program.empty()) {
    q::SimBuilderOptions options;
    options.hardware_revisions = std::move(revisions);
    return qs::make_sim_builder(c.bundle_dir, options);
  }
  q::CommandBuilderConfig config;
  config.program = c.builder_program;
  config.args = c.builder_args;
  return qs::make_command_builder(config, c.bundle_dir);
}

// The set, checked against the fleet's workloads: --workload-catalog, else the sim's.
Result<q::ModelSet> load_checked_model_set(const QualifyCommands& c) {
  auto set = q::load_model_set_file(c.model_set_path);
  if (!set) return set;
  Result<q::WorkloadCatalog> catalog = kiln::sim::workloads::sim_workload_catalog();
  if (!c.workload_catalog_path.empty()) catalog = q::load_workload_catalog_file(c.workload_catalog_path);
  if (!catalog) return tl::unexpected(catalog.error());
  if (auto ok = q::check_workloads(*set, *catalog); !ok) {
    return fail(ok.error().code, fmt::format("{}: {}", c.model_set_path, ok.error().message));
  }
  return set;
}

// ---- changes and bundles

int change_command(QualifyCommands& c, Client& client, bool json) {
  std::vector<q::Change> changes;
  if (c.change_add->parsed()) {
    const auto layer = q::layer_from_string(c.new_change_layer);
    if (!layer) {
      return report({Errc::invalid_argument, fmt::format("--layer {} is not one of model, framework, compiler, "
                                                               "kernels, runtime, driver, firmware",
                                                               c.new_change_layer)});
    }
    c.new_change.layer = *layer;
    if (c.new_change.merged_at_ms == 0) c.new_change.merged_at_ms = wall_now_ms();
    changes.push_back(c.new_change);
  } else {
    std::ifstream in(c.import_file, std::ios::binary);
    if (!in) return report({Errc::config, fmt::format("cannot read {}; check the path", c.import_file)});
    std::ostringstream text;
    text << in.rdbuf();
    auto history = q::parse_change_history(text.str(), c.import_file, wall_now_ms());
    if (!history) return report(history.error());
    changes = std::move(*history);
  }
  for (const auto& change : changes) {
    if (auto ok = qs::record_change(client, change); !ok) return report(ok.error());
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& change : changes) out.push_back(q::to_json(change));
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format("recorded {} change{}\n", changes.size(), changes.size() == 1 ? "" : "s");
  }
  return kExitOk;
}

int changes_command(Client& client, bool json) {
  auto changes = qs::list_changes(client);
  if (!changes) return report(changes.error());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& change : *changes) out.push_back(q::to_json(change));
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (changes->empty()) {
    std::cout << "no changes recorded; kiln change add or kiln change import\n";
    return kExitOk;
  }
  std::cout << fmt::format("{:<5} {:<12} {:<10} {:<18} {:<21} {}\n", "#", "CHANGE", "LAYER", "OWNER", "MERGED",
                           "SUMMARY");
  for (std::size_t i = 0; i < changes->size(); ++i) {
    const auto& change = (*changes)[i];
    std::cout << fmt::format("{:<5} {:<12} {:<10} {:<18} {:<21} {}\n", i, change.id, q::to_string(change.layer),
                             change.owner_team, time_text(change.merged_at_ms), change.summary);
  }
  return kExitOk;
}

int bundle_build_command(QualifyCommands& c, Client& client, bool json) {

  auto history = qs::list_changes(client);
  if (!history) return report(history.error());
  if (history->empty()) {
    return report({Errc::not_found, "no changes are recorded; record them first (kiln change import FILE)"});
  }
  std::size_t index = history->size() - 1;
  if (!c.build_at.empty()) {
    auto it = std::find_if(history->begin(), history->end(), [&](const q::Change& ch) { return ch.id == c.build_at; });
    if (it == history->end()) {
      return report({Errc::not_found, fmt::format("change {} is not recorded; `kiln changes` lists them",
                                                        c.build_at)});
    }
    index = static_cast<std::size_t>(it - history->begin());
  }
  auto bundle = configured_builder(c, c.build_revisions)->build(*history, index);
  if (!bundle) return report(bundle.error());
  if (auto ok = qs::record_bundle(client, *bundle); !ok) return report(ok.error());
  if (json) {
    std::cout << q::to_json(*bundle).dump(2) << "\n";
  } else {
    std::cout << fmt::format("bundle {} at change {} ({} changes, revisions {})\n", bundle->id,
                             (*history)[index].id, bundle->change_ids.size(),
                             fmt::join(bundle->hardware_revisions, ","));
  }
  return kExitOk;
}

int bundles_command(Client& client, bool json) {
  auto bundles = qs::list_bundles(client);
  if (!bundles) return report(bundles.error());
  auto baselines = qs::list_baselines(client);
  if (!baselines) return report(baselines.error());
  if (json) {
    nlohmann::json out = {{"bundles", nlohmann::json::array()}, {"baselines", nlohmann::json::object()}};
    for (const auto& bundle : *bundles) out["bundles"].push_back(q::to_json(bundle));
    for (const auto& [revision, baseline] : *baselines) {
      out["baselines"][revision] = {{"bundle_id", baseline.bundle_id},
                                    {"accepted_by_run", baseline.accepted_by_run},
                                    {"accepted_at_ms", baseline.accepted_at_ms}};
    }
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (bundles->empty()) {
    std::cout << "no bundles; kiln bundle build\n";
    return kExitOk;
  }
  std::cout << fmt::format("{:<12} {:>7} {:<14} {:<6} {}\n", "BUNDLE", "CHANGES", "LAST CHANGE", "REVS",
                           "BASELINE OF");
  for (const auto& bundle : *bundles) {
    std::vector<std::string> baseline_of;
    for (const auto& [revision, baseline] : *baselines) {
      if (baseline.bundle_id == bundle.id) baseline_of.push_back(revision);
    }
    std::cout << fmt::format("{:<12} {:>7} {:<14} {:<6} {}\n", short_id(bundle.id), bundle.change_ids.size(),
                             bundle.change_ids.empty() ? "-" : bundle.change_ids.back(),
                             fmt::format("{}", fmt::join(bundle.hardware_revisions, ",")),
                             fmt::format("{}", fmt::join(baseline_of, ",")));
  }
  return kExitOk;
}

int bundle_accept_command(QualifyCommands& c, Client& client, bool json) {
  auto bundle = qs::find_bundle(client, c.bundle_id);
  if (!bundle) return report(bundle.error());
  const std::vector<std::string> revisions = c.accept_revisions.empty() ? bundle->hardware_revisions : c.accept_revisions;
  for (const auto& revision : revisions) {
    if (auto ok = qs::accept_baseline(client, {revision, bundle->id, "", wall_now_ms()}); !ok) {
      return report(ok.error());
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"bundle_id", bundle->id}, {"revisions", revisions}}.dump() << "\n";
  } else {
    std::cout << fmt::format("bundle {} is the baseline of revision{} {}\n", short_id(bundle->id),
                             revisions.size() == 1 ? "" : "s", fmt::join(revisions, ", "));
  }
  return kExitOk;
}

// ---- qualification runs

// The directory sink, or the webhook sink (which keeps its record in the tickets directory).
Result<std::unique_ptr<q::TicketSink>> open_ticket_sink(const QualifyCommands& c) {
  if (c.webhook_config.empty()) {
    auto sink = q::DirectoryTicketSink::open(c.tickets_dir);
    if (!sink) return tl::unexpected(sink.error());
    return std::unique_ptr<q::TicketSink>(std::make_unique<q::DirectoryTicketSink>(std::move(*sink)));
  }
  auto table = config::parse_toml_file(c.webhook_config, "the webhook config", "check --webhook-config",
                                       "fix the webhook config");
  if (!table) return fail(Errc::config, table.error().message);
  const std::vector<std::string_view> settings = {"url",        "headers",      "bearer_token_file",
                                                  "timeout_ms", "max_attempts", "retry_backoff_ms"};
  if (auto ok = config::check_known_keys(c.webhook_config, *table, "the webhook config", settings); !ok) {
    return tl::unexpected(ok.error());
  }
  q::WebhookSinkConfig config;
  for (const auto& [key, node] : *table) {
    const std::string_view name = key.str();
    const auto wrong_type = [&](std::string_view type) {
      return fail(Errc::config,
                  fmt::format("{}: {} must be {}", config::where(c.webhook_config, node.source()), name, type));
    };
    if (name == "url" || name == "bearer_token_file") {
      if (!node.is_string()) return wrong_type("a string");
      (name == "url" ? config.url : config.bearer_token_file) = *node.value<std::string>();
    } else if (name == "headers") {
      if (!node.is_table()) return wrong_type("a table of header = \"value\"");
      for (const auto& [header, value] : *node.as_table()) {
        if (!value.is_string()) {
          return fail(Errc::config, fmt::format("{}: header {} must be a string",
                                                config::where(c.webhook_config, value.source()), header.str()));
        }
        config.headers[std::string(header.str())] = *value.value<std::string>();
      }
    } else {
      if (!node.is_integer()) return wrong_type("an integer");
      const std::int64_t value = *node.value<std::int64_t>();
      if (name == "timeout_ms") config.timeout_ms = value;
      if (name == "max_attempts") config.max_attempts = static_cast<int>(value);
      if (name == "retry_backoff_ms") config.retry_backoff_ms = value;
    }
  }
  auto sink = q::WebhookTicketSink::open(config, c.tickets_dir);
  if (!sink) return tl::unexpected(sink.error());
  return std::unique_ptr<q::TicketSink>(std::make_unique<q::WebhookTicketSink>(std::move(*sink)));
}

// Starts the same command again in the background, detached from the terminal, with --wait
// and a fixed run id; its progress goes to the log file.
int run_in_background(const QualifyCommands& c, const std::string& run_id, int argc, char** argv, bool json) {
  const std::string log = c.log_path.empty() ? fmt::format("kiln-run-{}.log", run_id) : c.log_path;
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) return report({Errc::io, fmt::format("cannot open the log {}; pass --log FILE", log)});
  std::vector<std::string> args(argv, argv + argc);
  args.push_back("--wait");
  if (c.run_id.empty()) {
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

int qualification_command(QualifyCommands& c, Client& client, bool json, int argc, char** argv) {
  const q::Tier tier = c.smoke->parsed() ? q::Tier::smoke : c.nightly->parsed() ? q::Tier::nightly : q::Tier::release;

  auto set = load_checked_model_set(c);
  if (!set) return report(set.error());
  auto candidate = qs::find_bundle(client, c.run_bundle);
  if (!candidate) return report(candidate.error());
  const std::string run_id = !c.run_id.empty() ? c.run_id : default_run_id(tier, *candidate, wall_now_ms());
  if (!c.wait) return run_in_background(c, run_id, argc, argv, json);

  auto history = qs::list_changes(client);
  if (!history) return report(history.error());
  auto baseline_records = qs::list_baselines(client);
  if (!baseline_records) return report(baseline_records.error());
  auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return report(nodes.error());

  q::RunInput input;
  input.candidate = *candidate;
  input.set = *set;
  input.history = *history;
  auto& settings = input.settings;
  settings.tier = tier;
  settings.run_id = run_id;
  settings.repeats_per_side = c.repeats;
  settings.repeats_multiplier = tier == q::Tier::release ? 2 : 1;
  settings.max_jobs_in_flight = c.max_jobs;
  settings.seed = stats::stable_hash(run_id);
  std::set<std::string> fleet_revisions;
  for (const auto& node : nodes->nodes) fleet_revisions.insert(node.hardware_revision);
  for (const auto& revision : candidate->hardware_revisions) {
    if (fleet_revisions.count(revision)) {
      settings.revisions.push_back(revision);
    } else {
      std::cerr << fmt::format("kiln: no node of revision {} is registered; the run skips it\n", revision);
    }
  }
  if (settings.revisions.empty()) {
    return report({Errc::unavailable, fmt::format("no registered node has any of the bundle's revisions ({}); "
                                                        "start agents of those revisions",
                                                        fmt::join(candidate->hardware_revisions, ", "))});
  }
  for (const auto& revision : settings.revisions) {
    auto it = baseline_records->find(revision);
    if (it == baseline_records->end() || it->second.bundle_id == candidate->id) continue;
    auto baseline = qs::find_bundle(client, it->second.bundle_id);
    if (!baseline) return report(baseline.error());
    input.baselines[revision] = *baseline;
  }
  if (tier == q::Tier::smoke) {
    std::string change_id = c.smoke_change.empty() ? candidate->change_ids.back() : c.smoke_change;
    auto change = std::find_if(history->begin(), history->end(), [&](const q::Change& ch) { return ch.id == change_id; });
    if (change == history->end()) {
      return report({Errc::not_found, fmt::format("change {} is not recorded; `kiln changes` lists them",
                                                        change_id)});
    }
    q::PresubmitOptions options;
    options.max_models = c.smoke_models;
    for (const auto& picked : q::select_presubmit(*change, *set, options)) {
      input.models.push_back(*set->find(picked.name));
    }
  } else {
    input.models = set->models;
    if (c.max_models > 0 && input.models.size() > c.max_models) input.models.resize(c.max_models);
  }
  const std::vector<q::QualificationModel> input_models = input.models;

  const q::RunSettings run_settings = input.settings;
  auto run = q::QualificationRun::start(std::move(input), wall_now_ms());
  if (!run) return report(run.error());
  auto sink = open_ticket_sink(c);
  if (!sink) return report(sink.error());
  auto builder = configured_builder(c, candidate->hardware_revisions);

  qs::DriverOptions options;
  options.bundle_dir = c.bundle_dir;
  options.golden_dir = c.golden_dir;
  options.progress = &std::cerr;
  options.stop = &g_stop;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  std::cerr << fmt::format("run {}: {} of bundle {} on revision{} {}, {} model runs\n", run_id, q::to_string(tier),
                           short_id(candidate->id), run_settings.revisions.size() == 1 ? "" : "s",
                           fmt::join(run_settings.revisions, ", "), run->report().models.size());
  auto outcome = qs::drive_run(client, *run, *set, *history, *builder, **sink, options);
  if (!outcome) return report(outcome.error());
  q::RunReport run_report = *outcome;

  // The release's stability soak: the whole set again, correctness only, round after round on
  // whatever nodes are free; a failure anywhere is triaged like any other and fails the release.
  const std::uint32_t soak_rounds = tier == q::Tier::release && run_report.passed ? c.soak_rounds : 0;
  for (std::uint32_t round = 1; round <= soak_rounds && run_report.passed; ++round) {
    q::RunInput soak;
    soak.candidate = *candidate;
    soak.set = *set;
    soak.history = *history;
    soak.models = input_models;
    soak.settings = run_settings;
    soak.settings.run_id = fmt::format("{}-soak{}", run_id, round);
    soak.settings.seed = stats::stable_hash(soak.settings.run_id);
    auto soak_run = q::QualificationRun::start(std::move(soak), wall_now_ms());
    if (!soak_run) return report(soak_run.error());
    std::cerr << fmt::format("run {}: stability soak round {} of {}\n", run_id, round, soak_rounds);
    auto soaked = qs::drive_run(client, *soak_run, *set, *history, *builder, **sink, options);
    if (!soaked) return report(soaked.error());
    for (auto model : soaked->models) {
      model.detail = fmt::format("soak round {}: {}", round, model.detail);
      run_report.models.push_back(std::move(model));
    }
    run_report.tickets.insert(run_report.tickets.end(), soaked->tickets.begin(), soaked->tickets.end());
    run_report.jobs_started += soaked->jobs_started;
    run_report.passed = soaked->passed;
    run_report.finished_at_ms = soaked->finished_at_ms;
  }
  if (soak_rounds > 0) {
    nlohmann::json document = q::to_json(run_report);
    document["summary"] = q::summary_text(run_report);
    if (auto ok = qs::record_run(client, run_id, document); !ok) return report(ok.error());
  }

  // Flaky tests are counted over every recorded run; one over its budget gets a ticket to its owner.
  if (auto runs = qs::list_runs(client); runs) {
    for (const auto& ticket : q::flake_budget_tickets(q::flake_ledger_from_reports(*runs), wall_now_ms())) {
      if (auto filed = (*sink)->file(ticket); filed && *filed == q::FileResult::filed) {
        std::cerr << fmt::format("ticket {} to {}: {}\n", ticket.id, ticket.team, ticket.title);
      }
    }
  }

  if (!c.junit_path.empty()) {
    std::ofstream out(c.junit_path, std::ios::trunc);
    out << q::to_junit_xml(run_report);
    if (!out) return report({Errc::io, fmt::format("cannot write {}; check the path", c.junit_path)});
  }
  if (run_report.passed && tier != q::Tier::smoke && !c.no_accept) {
    for (const auto& revision : run_settings.revisions) {
      if (auto ok = qs::accept_baseline(client, {revision, candidate->id, run_id, wall_now_ms()}); !ok) {
        return report(ok.error());
      }
    }
    std::cerr << fmt::format("bundle {} is now the baseline of {}\n", short_id(candidate->id),
                             fmt::join(run_settings.revisions, ", "));
  }
  if (json) {
    std::cout << q::to_json(run_report).dump(2) << "\n";
  } else {
    std::cout << q::summary_text(run_report);
  }
  return run_report.passed ? kExitOk : kExitFailed;
}

int runs_command(Client& client, bool json) {
  auto runs = qs::list_runs(client);
  if (!runs) return report(runs.error());
  if (json) {
    std::cout << nlohmann::json(*runs).dump(2) << "\n";
    return kExitOk;
  }
  if (runs->empty()) {
    std::cout << "no qualification runs yet; kiln smoke, kiln nightly or kiln qualify-release\n";
    return kExitOk;
  }
  std::cout << fmt::format("{:<36} {:<8} {:<12} {:>6} {:<9}\n", "RUN", "TIER", "BUNDLE", "MODELS", "VERDICT");
  for (const auto& run : *runs) {
    const bool finished = run.value("finished", false);
    const std::string verdict = !finished ? "running" : run.value("passed", false) ? "passed" : "failed";
    std::cout << fmt::format("{:<36} {:<8} {:<12} {:>6} {:<9}\n", run.value("run_id", ""), run.value("tier", ""),
                             run.value("candidate_bundle_id", "").substr(0, 12),
                             run.contains("models") ? run["models"].size() : 0, verdict);
  }
  return kExitOk;
}

int run_show_command(QualifyCommands& c, Client& client, bool json) {
  auto run = qs::get_run(client, c.show_run_id);
  if (!run) return report(run.error());
  if (json) {
    std::cout << run->dump(2) << "\n";
  } else {
    std::cout << run->value("summary", std::string("(no summary recorded)"));
    if (!run->value("finished", false)) std::cout << "(still running)\n";
  }
  return run->value("finished", false) && !run->value("passed", false) ? kExitFailed : kExitOk;
}

int tickets_command(QualifyCommands& c, bool json) {
  if (auto ok = need(c.tickets_dir, "--tickets-dir", "KILN_TICKETS_DIR", "the ticket directory"); !ok) {
    return report(ok.error());
  }
  if (!std::filesystem::is_directory(c.tickets_dir)) {
    return report({Errc::not_found, fmt::format("{} is not a ticket directory; give the --tickets-dir the runs used",
                                                c.tickets_dir)});
  }
  auto sink = q::DirectoryTicketSink::open(c.tickets_dir);
  if (!sink) return report(sink.error());
  auto tickets = sink->list();
  if (!tickets) return report(tickets.error());
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& ticket : *tickets) out.push_back(nlohmann::json::parse(q::to_json_text(ticket)));
    std::cout << out.dump(2) << "\n";
    return kExitOk;
  }
  if (tickets->empty()) {
    std::cout << "no tickets in " << c.tickets_dir << "\n";
    return kExitOk;
  }
  for (const auto& ticket : *tickets) {
    std::cout << fmt::format("{}  {:<22} {:<16} {:<14} {}\n", ticket.id, q::to_string(ticket.kind), ticket.team,
                             ticket.culprit_change, ticket.title);
  }
  return kExitOk;
}

}  // namespace

QualifyCommandsPtr add_qualify_commands(CLI::App& app) { return QualifyCommandsPtr(make(app)); }

bool qualify_command_parsed(const QualifyCommands& c) {
  for (const CLI::App* command : {c.change, c.changes, c.bundle, c.bundles, c.smoke, c.nightly, c.release, c.runs,
                                  c.run, c.tickets}) {
    if (command->parsed()) return true;
  }
  return false;
}

// What the command needs besides a coordinator, checked before connecting.
Status check_arguments(const QualifyCommands& c) {
  if (c.bundle_build->parsed()) {
    return need(c.bundle_dir, "--bundle-dir", "KILN_BUNDLE_DIR",
                "the bundle directory (the stack files, shared with the agents)");
  }
  if (!c.smoke->parsed() && !c.nightly->parsed() && !c.release->parsed()) return {};
  for (auto ok : {need(c.model_set_path, "--model-set", "KILN_MODEL_SET",
                       "the qualification set (the demo's is coordinator/qualification/data/qualification-set.toml)"),
                  need(c.bundle_dir, "--bundle-dir", "KILN_BUNDLE_DIR", "the bundle directory"),
                  need(c.golden_dir, "--golden-dir", "KILN_GOLDEN_DIR", "the golden references"),
                  need(c.tickets_dir, "--tickets-dir", "KILN_TICKETS_DIR", "the ticket directory")}) {
    if (!ok) return ok;
  }
  return {};
}

// CLI11 (2.1) hands an option's environment variable to every subcommand that declares the option,
// parsed or not, and their callbacks then overwrite what the command line gave: so the variables
// are read here, after parsing, and only fill what the command line left empty.
void apply_environment(QualifyCommands& c) {
  for (auto [value, variable] : {std::pair<std::string*, const char*>{&c.model_set_path, "KILN_MODEL_SET"},
                                 {&c.bundle_dir, "KILN_BUNDLE_DIR"},
                                 {&c.golden_dir, "KILN_GOLDEN_DIR"},
                                 {&c.tickets_dir, "KILN_TICKETS_DIR"},
                                 {&c.webhook_config, "KILN_WEBHOOK_CONFIG"},
                                 {&c.workload_catalog_path, "KILN_WORKLOAD_CATALOG"},
                                 {&c.builder_program, "KILN_BUILDER"}}) {
    const char* set = std::getenv(variable);
    if (value->empty() && set != nullptr) *value = set;
  }
}

int run_qualify_command(QualifyCommands& c, const std::function<Result<Client*>()>& connect, bool json, int argc,
                        char** argv) {
  apply_environment(c);
  if (c.tickets->parsed()) return tickets_command(c, json);
  if (auto ok = check_arguments(c); !ok) return report(ok.error());
  auto connected = connect();
  if (!connected) return report(connected.error());
  Client* client = *connected;
  if (c.change->parsed()) return change_command(c, *client, json);
  if (c.changes->parsed()) return changes_command(*client, json);
  if (c.bundle_build->parsed()) return bundle_build_command(c, *client, json);
  if (c.bundle_accept->parsed()) return bundle_accept_command(c, *client, json);
  if (c.bundle_show->parsed()) {
    auto bundle = qs::find_bundle(*client, c.bundle_id);
    if (!bundle) return report(bundle.error());
    std::cout << q::to_json(*bundle).dump(2) << "\n";
    return kExitOk;
  }
  if (c.bundles->parsed()) return bundles_command(*client, json);
  if (c.runs->parsed()) return runs_command(*client, json);
  if (c.run->parsed()) return run_show_command(c, *client, json);
  return qualification_command(c, *client, json, argc, argv);
}

}  // namespace kiln::cli
