// kiln plan: tonight's cells of a test matrix on a chip-hour budget (docs/strategy.md), fed by
// the coordinator's records where they exist (a model's measured chip-hours, its recent
// failures), from the matrix file alone offline; --record keeps the nights in a state file so
// that rotation works across nights.
#include <filesystem>
#include <set>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/config/toml_errors.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_run.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/text.h"
#include "qualification/run_report.h"
#include "client/records_client.h"
#include "report/report_files.h"
#include "strategy/plan_report.h"
#include "strategy/plan_state.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace strategy = kiln::strategy;

namespace {

// What the measure job of a model report cost: chips x hours of each of its jobs (every rank of
// a gang). None when the coordinator no longer has a job, or it measured no time. The gate's
// later rounds (q::gate_rounds) are as large again each.
std::optional<double> measured_chip_hours(Client& client, const q::MeasuredJob& measured) {
  std::vector<std::uint64_t> ids = measured.rank_job_ids;
  if (ids.empty()) ids.push_back(measured.job_id);
  double chip_hours = 0;
  for (std::uint64_t id : ids) {
    auto detail = expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{id}));
    if (!detail) return std::nullopt;
    chip_hours += detail->job.chips * static_cast<double>(detail->job.duration_ms) / 3'600'000.0;
  }
  if (chip_hours <= 0) return std::nullopt;
  return chip_hours;
}

struct RecordedEvidence {
  strategy::Evidence evidence;
  std::size_t runs_read = 0;
};

// The newest measured cost of each model of the matrix's records factor, and its failing
// verdicts in runs finished since `since_ms`.
Result<RecordedEvidence> read_evidence(Client& client, const strategy::Matrix& matrix, std::int64_t since_ms) {
  RecordedEvidence out;
  const auto factor = matrix.records_factor();
  if (!factor) return out;
  std::set<std::string> models;
  for (const strategy::FactorValue& value : matrix.factors()[*factor].values) models.insert(value.name);
  auto runs = q::shell::list_runs(client);
  if (!runs) return tl::unexpected(runs.error());
  for (auto run = runs->rbegin(); run != runs->rend(); ++run) {  // the newest first
    auto report = q::report_outline_from_json(*run);
    // The rounds each model's gate took in this run: its extra looks and confirmation are paid too.
    std::map<std::string, int> rounds;
    if (const auto entries = run->find("models"); entries != run->end() && entries->is_array()) {
      for (const auto& entry : *entries) {
        if (entry.contains("model") && entry.at("model").is_string()) {
          rounds[entry.at("model").get<std::string>()] = q::gate_rounds(entry);
        }
      }
    }
    if (!report || !report->finished) continue;
    ++out.runs_read;
    for (const q::ModelReport& model : report->models) {
      if (!models.contains(model.model)) continue;
      if (q::fails_run(model.verdict) && report->finished_at_ms >= since_ms) {
        ++out.evidence.recent_failures[model.model];
      }
      if (model.measure_job && !out.evidence.chip_hours.contains(model.model)) {
        if (auto cost = measured_chip_hours(client, *model.measure_job)) {
          const auto taken = rounds.find(model.model);
          out.evidence.chip_hours[model.model] = *cost * (taken == rounds.end() ? 1 : taken->second);
        }
      }
    }
  }
  return out;
}

class PlanCommand : public Command {
 public:
  std::string name() const override { return "plan"; }
  std::string help() const override {
    return "tonight's cells of a test matrix on a chip-hour budget: every pair of values covered, the rest by risk, "
           "every cell in rotation (docs/strategy.md)";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--matrix", matrix_path_, "the matrix file (factors, values, costs, risks; docs/strategy.md)")
        ->required();
    command.add_option("--budget-chip-hours", budget_, "tonight's budget in chip-hours")
        ->required()
        ->check(CLI::Range(0.0, 1e9));
    command.add_option("--night", night_, "the night's number (default: the state file's last night + 1, else 1)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
    command.add_option("--state", state_path_, "the state file of nights (which night each cell last ran)");
    command.add_flag("--record", record_, "record tonight's cells as run in the --state file (made if missing)");
    command.add_option("--seed", seed_, "seed of the covering construction (the same seed, the same plan)")
        ->capture_default_str();
    command.add_option("--top", top_, "how many of the skipped cells to list, the riskiest first")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    command.add_option("--failures-since", failures_since_, "failing verdicts this recent raise a model's risk")
        ->capture_default_str();
    command.add_flag("--offline", offline_, "do not ask the coordinator: costs and risks from the matrix file alone");
  }
  Status check_arguments() override {
    if (record_ && state_path_.empty()) {
      return fail(Errc::invalid_argument, "--record needs --state FILE: the nights are recorded there");
    }
    if (!(budget_ > 0)) return fail(Errc::invalid_argument, "--budget-chip-hours must be above 0");
    auto since = parse_duration_ms(failures_since_, "--failures-since");
    if (!since) return tl::unexpected(since.error());
    failures_since_ms_ = *since;
    return check_output_path("--state", state_path_);
  }
  int run(CommandContext& context) override {
    auto text = config::read_text_file(matrix_path_, "the matrix file", "give --matrix FILE (docs/strategy.md)");
    if (!text) return report(Error{Errc::config, text.error().message});
    auto file = strategy::parse_matrix(*text, matrix_path_);
    if (!file) return report(file.error());
    strategy::Matrix& matrix = file->matrix;

    strategy::PlanState state;
    if (!state_path_.empty() && std::filesystem::exists(state_path_)) {
      auto state_text = config::read_text_file(state_path_, "the state file", "give another --state file");
      if (!state_text) return report(state_text.error());
      auto parsed = strategy::parse_plan_state(*state_text, state_path_);
      if (!parsed) return report(parsed.error());
      state = std::move(*parsed);
    }
    const std::int64_t night = night_ > 0 ? night_ : state.last_night + 1;

    std::vector<std::string> sources = evidence(context, matrix);
    for (const std::string& source : sources) std::cerr << "kiln: " << source << "\n";

    strategy::PlanRequest request;
    request.budget_chip_hours = budget_;
    request.night = night;
    request.seed = seed_;
    request.rotation_nights = file->rotation_nights;
    request.top_skipped = top_;
    const strategy::Plan plan = strategy::plan_night(matrix, strategy::history_of(state, matrix), request);
    std::cout << (context.json() ? strategy::plan_json_text(matrix, plan, sources) : strategy::plan_text(matrix, plan));
    if (!record_) return kExitOk;
    if (auto ok = strategy::record_plan(state, matrix, plan, state_path_); !ok) return report(ok.error());
    if (auto ok = report::write_file_atomically(state_path_, strategy::plan_state_text(state)); !ok) return report(ok.error());
    std::cerr << fmt::format("kiln: recorded night {} ({} cells) in {}\n", night, plan.chosen.size(), state_path_);
    return kExitOk;
  }

 private:
  // Applies the coordinator's records to the matrix unless offline; says where the figures came from.
  std::vector<std::string> evidence(CommandContext& context, strategy::Matrix& matrix) {
    const std::string file_only = "costs and risks from the matrix file alone";
    if (offline_) return {"offline (--offline): " + file_only};
    if (!matrix.records_factor()) {
      return {"the matrix names no records_factor: " + file_only + " (docs/strategy.md, \"The matrix file\")"};
    }
    auto client = context.client();
    if (!client) return {"offline (no coordinator: " + client.error().message + "): " + file_only};
    auto recorded = read_evidence(**client, matrix,
                                  std::max<std::int64_t>(0, wall_now_ms() - static_cast<std::int64_t>(failures_since_ms_)));
    if (!recorded) return {"offline (the coordinator's records: " + recorded.error().message + "): " + file_only};
    matrix.apply(recorded->evidence);
    std::size_t failing = 0;
    for (const auto& [model, failures] : recorded->evidence.recent_failures) failing += failures > 0;
    return {fmt::format("records: {} finished runs read; measured chip-hours for {} of {} values of '{}', the "
                        "matrix file's cost for the rest; {} of them failed in the last {}",
                        recorded->runs_read, recorded->evidence.chip_hours.size(),
                        matrix.factors()[*matrix.records_factor()].values.size(), matrix.records_factor_name(),
                        failing, failures_since_)};
  }

  std::string matrix_path_;
  double budget_ = 0;
  std::int64_t night_ = 0;
  std::string state_path_;
  bool record_ = false;
  std::uint64_t seed_ = 1;
  std::size_t top_ = 10;
  std::string failures_since_ = "7d";
  std::uint64_t failures_since_ms_ = 0;
  bool offline_ = false;
};

}  // namespace

void add_plan_command(CommandList& commands) { commands.push_back(std::make_unique<PlanCommand>()); }

}  // namespace kiln::cli
