// kiln compare-tensors and kiln compare: local tools that read files and never connect.
#include <iostream>

#include <CLI/CLI.hpp>

#include "common/numerics/compare_cli.h"
#include "common/stats/compare_cli.h"
#include "cli/commands/all.h"

namespace kiln::cli {

namespace {

class CompareTensorsCommand : public Command {
 public:
  std::string name() const override { return "compare-tensors"; }
  std::string help() const override {
    return "compare an output tensor (.npy, .safetensors) with its golden reference under the dtype's tolerance; "
           "exit 0 within tolerance, 1 mismatch, 2 input error";
  }
  void add_options(CLI::App& command) override { numerics::add_compare_tensors_options(command, args_); }
  int run(CommandContext& context) override {
    args_.json = args_.json || context.json();
    return numerics::run_compare_tensors(args_, std::cout, std::cerr);
  }

 private:
  numerics::CompareTensorsArgs args_;
};

class CompareSamplesCommand : public Command {
 public:
  std::string name() const override { return "compare"; }
  std::string help() const override {
    return "the performance gate on your own samples (one number per line): Mann-Whitney U, Hodges-Lehmann shift "
           "and interval; exit 0 no regression, 1 regression, 2 input error, 3 inconclusive";
  }
  void add_options(CLI::App& command) override {
    command.add_option("BASELINE", args_.baseline_path, "baseline samples file")->required();
    command.add_option("CANDIDATE", args_.candidate_path, "candidate samples file")->required();
    command.add_flag("--lower-is-better", lower_is_better_, "smaller numbers are better (latency)");
    command.add_option("--min-effect", args_.min_effect, "smallest relative change that matters")
        ->capture_default_str();
    command.add_option("--alpha", args_.alpha, "significance level")->capture_default_str();
    command.add_option("--resamples", args_.bootstrap_resamples, "bootstrap resamples")->capture_default_str();
    command.add_option("--seed", args_.seed, "bootstrap seed")->capture_default_str();
  }
  int run(CommandContext& context) override {
    args_.json = context.json();
    args_.higher_is_better = !lower_is_better_;
    return stats::run_compare_samples(args_, std::cout, std::cerr);
  }

 private:
  stats::CompareSamplesArgs args_;
  bool lower_is_better_ = false;
};

}  // namespace

void add_compare_commands(CommandList& commands) {
  commands.push_back(std::make_unique<CompareTensorsCommand>());
  commands.push_back(std::make_unique<CompareSamplesCommand>());
}

}  // namespace kiln::cli
