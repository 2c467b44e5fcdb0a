// kiln smoke, kiln nightly, kiln qualify-release: one command object per tier.
#include <CLI/CLI.hpp>

#include "coordinator/cli/cli_options.h"
#include "coordinator/cli/commands/all.h"
#include "coordinator/cli/commands/qualification_run.h"
#include "coordinator/cli/exit_codes.h"

namespace kiln::cli {

namespace q = kiln::qualification;

namespace {

class QualificationRunCommand : public Command {
 public:
  explicit QualificationRunCommand(q::Tier tier) : tier_(tier) {
    if (tier == q::Tier::smoke) options_.max_models = 4;
  }
  std::string name() const override {
    switch (tier_) {
      case q::Tier::smoke: return "smoke";
      case q::Tier::nightly: return "nightly";
      case q::Tier::release: return "qualify-release";
    }
    return "";
  }
  std::string help() const override {
    switch (tier_) {
      case q::Tier::smoke:
        return "presubmit smoke of a bundle: the models its change touches, on every revision; exit 0 pass, 1 fail";
      case q::Tier::nightly:
        return "the whole qualification set against the accepted baselines; regressions are confirmed, bisected "
               "and ticketed";
      case q::Tier::release:
        return "release qualification: the whole set with twice the repeats, training curves and evals, on every "
               "revision";
    }
    return "";
  }
  void add_options(CLI::App& command) override;
  Status check_arguments() override;
  int run(CommandContext& context) override;

 private:
  void add_tier_options(CLI::App& command);

  q::Tier tier_;
  RunOptions options_;
  q::ModelSet set_;
};

void QualificationRunCommand::add_options(CLI::App& command) {
  auto& o = options_;
  command.add_option("--bundle", o.bundle, "the candidate bundle (id or unique prefix; kiln bundles)")->required();
  command.add_option("--model-set", o.model_set_path, "the qualification set (TOML; default: $KILN_MODEL_SET)");
  command.add_option("--workload-catalog", o.workload_catalog_path,
                     "the fleet's workloads and their kernels, as JSON (kiln-workload-model --list --json prints the "
                     "sim's); the set's workloads and components are checked against it (default: "
                     "$KILN_WORKLOAD_CATALOG, else the sim's)");
  add_builder_options(command, o.builder);
  command.add_option("--bundle-dir", o.builder.bundle_dir,
                     "where the bundles' stack files are (shared with the agents; default: $KILN_BUNDLE_DIR)");
  command.add_option("--golden-dir", o.golden_dir,
                     "the models' golden references (shared with the agents; default: $KILN_GOLDEN_DIR)");
  command.add_option("--tickets-dir", o.tickets_dir, "the ticket sink: one JSON file per ticket (default: "
                                                     "$KILN_TICKETS_DIR)");
  command.add_flag("--wait", o.wait, "run in the foreground until the verdict; the exit code is the verdict");
  command.add_option("--junit", o.junit_path, "write the verdict as JUnit XML here");
  command.add_option("--webhook-config", o.webhook_config,
                     "send tickets to an HTTP webhook (TOML: url, headers, bearer_token_file, timeout_ms, "
                     "max_attempts, retry_backoff_ms); the tickets directory keeps the record (default: "
                     "$KILN_WEBHOOK_CONFIG)");
  command.add_option("--repeats", o.repeats, "timed repeats per side in the first measurement")->capture_default_str();
  command.add_option("--max-jobs", o.max_jobs, "jobs in flight at once")->capture_default_str();
  command.add_option("--run-id", o.run_id, "name of the run (default: tier, time and bundle)");
  command.add_option("--log", o.log_path, "without --wait: where the background run writes its progress");
  command.add_option("--max-models", o.max_models, "at most this many models (0: all the tier selects)")
      ->capture_default_str();
  add_tier_options(command);
}

void QualificationRunCommand::add_tier_options(CLI::App& command) {
  auto& o = options_;
  if (tier_ == q::Tier::smoke) {
    command.add_option("--change", o.change, "the change under test (default: the bundle's last)");
    add_deprecated_option(command, "--models", "--max-models N",
                          [&o](const std::string& v) {
                            if (!CLI::detail::lexical_cast(v, o.max_models)) {
                              throw CLI::ValidationError("--models", v + " is not a number of models");
                            }
                          });
    return;
  }
  command.add_flag("--no-accept", o.no_accept, "do not make a passing bundle the new baseline");
  if (tier_ == q::Tier::release) {
    command.add_option("--soak-rounds", o.soak_rounds,
                       "stability soak: after the comparison, run the whole set this many more times across the "
                       "fleet; any failure fails the release")
        ->capture_default_str();
  }
}

Status QualificationRunCommand::check_arguments() {
  auto& o = options_;
  fill_from_environment(o.model_set_path, "KILN_MODEL_SET");
  fill_from_environment(o.builder.bundle_dir, "KILN_BUNDLE_DIR");
  fill_from_environment(o.golden_dir, "KILN_GOLDEN_DIR");
  fill_from_environment(o.tickets_dir, "KILN_TICKETS_DIR");
  fill_from_environment(o.webhook_config, "KILN_WEBHOOK_CONFIG");
  fill_from_environment(o.workload_catalog_path, "KILN_WORKLOAD_CATALOG");
  fill_from_environment(o.builder.program, "KILN_BUILDER");
  auto set = check_run_locally(o);
  if (!set) return tl::unexpected(set.error());
  set_ = std::move(*set);
  return {};
}

int QualificationRunCommand::run(CommandContext& context) {
  auto client = context.client();
  if (!client) return report(client.error());
  if (auto ok = check_run_role(**client, tier_); !ok) return report(ok.error());
  return run_qualification(options_, tier_, set_, **client, context.json(), context.argc(), context.argv());
}

}  // namespace

void add_qualification_commands(CommandList& commands) {
  for (const q::Tier tier : {q::Tier::smoke, q::Tier::nightly, q::Tier::release}) {
    commands.push_back(std::make_unique<QualificationRunCommand>(tier));
  }
}

}  // namespace kiln::cli
