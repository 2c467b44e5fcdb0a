// kiln smoke, kiln nightly, kiln qualify-release: one command object per tier. Each asks the
// qualifier for a run (qualification_run.h).
#include <CLI/CLI.hpp>

#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_run.h"
#include "cli/exit_codes.h"

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
};

void QualificationRunCommand::add_options(CLI::App& command) {
  auto& o = options_;
  command.add_option("--bundle", o.bundle, "the candidate bundle (id or unique prefix; kiln bundles)")->required();
  command.add_flag("--wait", o.wait, "follow the run until its verdict; the exit code is the verdict");
  command.add_option("--junit", o.junit_path, "with --wait: write the verdict as JUnit XML here");
  command.add_option("--repeats", o.repeats, "timed repeats per side in the first measurement")->capture_default_str();
  command.add_option("--max-jobs", o.max_jobs, "jobs in flight at once")->capture_default_str();
  command.add_option("--run-id", o.run_id, "name of the run (default: tier, time and bundle); the same command "
                                           "with a run's id follows that run");
  command.add_option("--max-models", o.max_models, "at most this many models (0: all the tier selects)")
      ->capture_default_str();
  command.add_option("--perf-rule", o.perf_rule,
                     "performance gate: sequential (repeats and rounds from each model's recorded noise; the "
                     "nightly's default) or fixed (--repeats, extra rounds, a confirmation rerun; smoke and release)")
      ->check(CLI::IsMember({"sequential", "fixed"}));
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

Status QualificationRunCommand::check_arguments() { return check_run_locally(options_); }

int QualificationRunCommand::run(CommandContext& context) {
  auto client = context.client();
  if (!client) return report(client.error());
  return run_qualification(options_, tier_, **client, context.json());
}

}  // namespace

void add_qualification_commands(CommandList& commands) {
  for (const q::Tier tier : {q::Tier::smoke, q::Tier::nightly, q::Tier::release}) {
    commands.push_back(std::make_unique<QualificationRunCommand>(tier));
  }
}

}  // namespace kiln::cli
