// kiln-bench-plan: the matrix planner on the statement's 15 x 12 x 3 x 8 x 4 matrix (or any
// matrix file) at a nightly budget: cells chosen, chip-hours, pairs covered, the risk covered
// against random choices of the same cost (median over seeds), and the nights a full rotation
// takes when nights are planned one after another. See docs/strategy.md.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/toml_errors.h"
#include "common/version.h"
#include "strategy/matrix.h"
#include "strategy/planner.h"

namespace {

using namespace kiln::strategy;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Cells in a seeded random order, each taken while the total stays within `chip_hours`: a
// choice of the same cost as the plan that knows nothing of risk or pairs.
struct RandomChoice {
  double chip_hours = 0;
  double risk = 0;
  std::size_t cells = 0;
  std::size_t pairs_covered = 0;
};

RandomChoice random_choice(const Matrix& matrix, double chip_hours, std::uint64_t seed, std::uint32_t rotation_nights) {
  std::vector<std::size_t> order(matrix.cell_count());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 1;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next() % i]);
  RandomChoice choice;
  std::vector<std::vector<std::vector<bool>>> seen;  // [f][g] pairs of values met
  const auto& factors = matrix.factors();
  seen.resize(factors.size());
  for (std::size_t f = 0; f < factors.size(); ++f) {
    seen[f].resize(factors.size());
    for (std::size_t g = f + 1; g < factors.size(); ++g) {
      seen[f][g].assign(factors[f].values.size() * factors[g].values.size(), false);
    }
  }
  for (std::size_t index : order) {
    const Cell cell = matrix.cell_at(index);
    const double cost = matrix.cost(cell);
    if (choice.chip_hours + cost > chip_hours) continue;
    choice.chip_hours += cost;
    choice.risk += cell_risk(matrix, cell, std::nullopt, rotation_nights);
    ++choice.cells;
    for (std::size_t f = 0; f < cell.size(); ++f) {
      for (std::size_t g = f + 1; g < cell.size(); ++g) {
        auto&& met = seen[f][g][cell[f] * factors[g].values.size() + cell[g]];
        if (!met) ++choice.pairs_covered;
        met = true;
      }
    }
  }
  return choice;
}

struct RotationRun {
  std::int64_t nights_until_every_cell = -1;  // -1: not within the nights simulated
  std::int64_t longest_gap_nights = 0;        // between two runs of a cell, or from the first night
  std::size_t min_pairs_covered = std::numeric_limits<std::size_t>::max();
  double max_chip_hours = 0;
};

RotationRun simulate_nights(const Matrix& matrix, const PlanRequest& first, std::int64_t nights) {
  RotationRun run;
  NightHistory history;
  history.first_night = first.night;
  std::vector<std::int64_t> last(matrix.cell_count(), first.night - 1);
  std::size_t never = matrix.cell_count();
  for (std::int64_t night = first.night; night < first.night + nights; ++night) {
    PlanRequest request = first;
    request.night = night;
    const Plan plan = plan_night(matrix, history, request);
    run.min_pairs_covered = std::min(run.min_pairs_covered, plan.pairs_covered);
    run.max_chip_hours = std::max(run.max_chip_hours, plan.chip_hours);
    for (const PlannedCell& cell : plan.chosen) {
      if (!history.last_run_night.contains(cell.index)) --never;
      run.longest_gap_nights = std::max(run.longest_gap_nights, night - last[cell.index]);
      last[cell.index] = night;
      history.last_run_night[cell.index] = night;
    }
    if (never == 0 && run.nights_until_every_cell < 0) run.nights_until_every_cell = night - first.night + 1;
  }
  // Cells still waiting at the end count up to the last night simulated.
  for (std::int64_t at : last) run.longest_gap_nights = std::max(run.longest_gap_nights, first.night + nights - 1 - at);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  std::string matrix_path = KILN_EXAMPLE_MATRIX;
  double budget = 2000;
  int seeds = 21;
  std::int64_t nights = 0;
  bool json = false;
  CLI::App app{"the matrix planner on a test matrix at a nightly chip-hour budget: cells, chip-hours, pairs "
               "covered, risk covered against random choices of the same cost, and rotation over simulated nights"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-plan"));
  app.add_option("--matrix", matrix_path, "the matrix file (default: the statement's 15 x 12 x 3 x 8 x 4)");
  app.add_option("--budget-chip-hours", budget, "the nightly budget")->check(CLI::Range(0.001, 1e9));
  app.add_option("--seeds", seeds, "seeds of the planner and of the random choices; figures are medians")
      ->check(CLI::Range(1, 1000));
  app.add_option("--nights", nights, "nights to simulate for rotation (default: twice the rotation the plan promises, "
                                     "at least 14)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--json", json, "print the figures as JSON");
  CLI11_PARSE(app, argc, argv);

  auto text = kiln::config::read_text_file(matrix_path, "the matrix file", "give --matrix FILE");
  if (!text) {
    std::cerr << "kiln-bench-plan: " << text.error().message << "\n";
    return 2;
  }
  auto file = parse_matrix(*text, matrix_path);
  if (!file) {
    std::cerr << "kiln-bench-plan: " << file.error().message << "\n";
    return 2;
  }
  const Matrix& matrix = file->matrix;

  std::vector<double> plan_share, random_share, ratio, plan_ms;
  std::vector<double> cells, chip_hours, pairs_share, random_pairs_share, cover;
  Plan first_plan;
  for (int s = 1; s <= seeds; ++s) {
    PlanRequest request;
    request.budget_chip_hours = budget;
    request.seed = static_cast<std::uint64_t>(s);
    request.rotation_nights = file->rotation_nights;
    const auto start = std::chrono::steady_clock::now();
    const Plan plan = plan_night(matrix, NightHistory{}, request);
    plan_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (s == 1) first_plan = plan;
    const RandomChoice random = random_choice(matrix, plan.chip_hours, static_cast<std::uint64_t>(s), file->rotation_nights);
    plan_share.push_back(plan.risk_covered / plan.risk_total);
    random_share.push_back(random.risk / plan.risk_total);
    ratio.push_back(random.risk > 0 ? plan.risk_covered / random.risk : 0);
    cells.push_back(static_cast<double>(plan.chosen.size()));
    cover.push_back(plan.full_cover_chip_hours);
    chip_hours.push_back(plan.chip_hours);
    pairs_share.push_back(static_cast<double>(plan.pairs_covered) / plan.pairs_total);
    random_pairs_share.push_back(static_cast<double>(random.pairs_covered) / plan.pairs_total);
  }
  PlanRequest request;
  request.budget_chip_hours = budget;
  request.rotation_nights = file->rotation_nights;
  const std::uint32_t promised = first_plan.rotation.nights > 0 ? first_plan.rotation.nights : file->rotation_nights;
  if (nights == 0) nights = std::max<std::int64_t>(14, 2 * promised);
  const RotationRun rotation = simulate_nights(matrix, request, nights);

  if (json) {
    const nlohmann::json doc{
        {"matrix", matrix_path},
        {"cells_total", matrix.cell_count()},
        {"budget_chip_hours", budget},
        {"seeds", seeds},
        {"cells_chosen_median", median(cells)},
        {"chip_hours_median", median(chip_hours)},
        {"pairs_total", first_plan.pairs_total},
        {"pairs_covered_share_min", *std::min_element(pairs_share.begin(), pairs_share.end())},
        {"full_cover_chip_hours_median", median(cover)},
        {"risk_covered_share_median", median(plan_share)},
        {"random_risk_covered_share_median", median(random_share)},
        {"risk_ratio_to_random_median", median(ratio)},
        {"random_pairs_covered_share_median", median(random_pairs_share)},
        {"plan_ms_median", median(plan_ms)},
        {"rotation",
         {{"promised_nights", promised},
          {"within_promise", first_plan.rotation.within_promise},
          {"full_rotation_chip_hours", first_plan.cost_total_chip_hours},
          {"nights_simulated", nights},
          {"nights_until_every_cell_ran", rotation.nights_until_every_cell},
          {"longest_gap_nights", rotation.longest_gap_nights},
          {"min_pairs_covered_per_night", rotation.min_pairs_covered},
          {"max_chip_hours_per_night", rotation.max_chip_hours}}},
    };
    std::cout << doc.dump(2) << "\n";
    return 0;
  }
  std::string dims;
  for (const Factor& factor : matrix.factors()) dims += (dims.empty() ? "" : " x ") + std::to_string(factor.values.size());
  std::cout << fmt::format("matrix {} ({} = {} cells, {:.0f} chip-hours for all), budget {:.0f} chip-hours, {} seeds\n",
                           matrix_path, dims, matrix.cell_count(), first_plan.cost_total_chip_hours, budget, seeds);
  std::cout << fmt::format("  cells chosen (median):          {:.0f}\n", median(cells));
  std::cout << fmt::format("  chip-hours (median):            {:.1f} of {:.0f}\n", median(chip_hours), budget);
  std::cout << fmt::format("  pairs covered (worst seed):     {:.1f}% of {} (random choice, median: {:.1f}%)\n",
                           100 * *std::min_element(pairs_share.begin(), pairs_share.end()), first_plan.pairs_total,
                           100 * median(random_pairs_share));
  std::cout << fmt::format("  pairwise cover alone (median):  {:.1f} chip-hours\n", median(cover));
  std::cout << fmt::format("  risk covered (median):          {:.1f}% (random choice of the same cost: {:.1f}%; "
                           "{:.2f}x)\n",
                           100 * median(plan_share), 100 * median(random_share), median(ratio));
  std::cout << fmt::format("  time to plan a night (median):  {:.0f} ms\n", median(plan_ms));
  std::cout << fmt::format("rotation over {} simulated nights (seed 1): every cell ran by night {}; longest gap {} "
                           "nights (the plan promises {}{}); every night {} pairs covered at least, {:.1f} chip-hours "
                           "at most\n",
                           nights,
                           rotation.nights_until_every_cell < 0 ? std::string("(never)")
                                                                : std::to_string(rotation.nights_until_every_cell),
                           rotation.longest_gap_nights, promised,
                           first_plan.rotation.within_promise ? "" : ", more than a week: the budget does not pay for one",
                           rotation.min_pairs_covered, rotation.max_chip_hours);
  return 0;
}
