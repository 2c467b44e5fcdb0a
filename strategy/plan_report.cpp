#include "strategy/plan_report.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::strategy {

namespace {

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 100.0; }

std::string age_text(std::int64_t age_nights) { return age_nights < 0 ? "never" : fmt::format("{}", age_nights); }

std::string rotation_text(const Plan& plan) {
  const Rotation& r = plan.rotation;
  if (r.nights == 0) return "none: the budget pays for the pairwise cover only";
  if (r.within_promise) return fmt::format("every cell runs within {} nights", r.nights);
  return fmt::format("a full rotation takes {} nights ({:.0f} chip-hours of cells at {:.1f} a night kept for "
                     "rotation); {} nights would need a budget of about {:.0f}",
                     r.nights, plan.cost_total_chip_hours, r.capacity_chip_hours, r.promised_nights,
                     plan.budget_chip_hours + plan.cost_total_chip_hours / r.promised_nights - r.capacity_chip_hours);
}

nlohmann::json cell_json(const Matrix& matrix, const PlannedCell& cell) {
  nlohmann::json values = nlohmann::json::object();
  for (std::size_t f = 0; f < cell.cell.size(); ++f) {
    values[matrix.factors()[f].name] = matrix.factors()[f].values[cell.cell[f]].name;
  }
  nlohmann::json out{{"values", values}, {"chip_hours", cell.chip_hours}, {"risk", cell.risk}};
  out["age_nights"] = cell.age_nights < 0 ? nlohmann::json(nullptr) : nlohmann::json(cell.age_nights);
  return out;
}

}  // namespace

std::string plan_text(const Matrix& matrix, const Plan& plan) {
  std::string out = fmt::format("{:<9} {:>10} {:>10} {:>5}  {}\n", "REASON", "CHIP-HOURS", "RISK", "AGE", "CELL");
  for (const PlannedCell& cell : plan.chosen) {
    out += fmt::format("{:<9} {:>10.2f} {:>10.2f} {:>5}  {}\n", to_string(cell.reason), cell.chip_hours, cell.risk,
                       age_text(cell.age_nights), matrix.describe(cell.cell));
  }
  if (!plan.skipped_top.empty()) {
    out += fmt::format("\nskipped, the riskiest {} of {}:\n", plan.skipped_top.size(), plan.skipped_count);
    for (const PlannedCell& cell : plan.skipped_top) {
      out += fmt::format("{:<9} {:>10.2f} {:>10.2f} {:>5}  {}\n", "skipped", cell.chip_hours, cell.risk,
                         age_text(cell.age_nights), matrix.describe(cell.cell));
    }
  }
  std::size_t pairwise = 0, rotation = 0;
  for (const PlannedCell& cell : plan.chosen) {
    pairwise += cell.reason == ChoiceReason::pairwise;
    rotation += cell.reason == ChoiceReason::rotation;
  }
  out += fmt::format("\nnight {}: {} of {} cells, {:.1f} of {:.1f} chip-hours\n", plan.night, plan.chosen.size(),
                     plan.cells_total, plan.chip_hours, plan.budget_chip_hours);
  out += fmt::format("  pairs covered: {} of {} ({}, {} of their risk weight); {} cells ({:.1f} chip-hours) added "
                     "for pairs the rotation's left; a cover from nothing costs {:.1f}\n",
                     plan.pairs_covered, plan.pairs_total, share_text(plan.pairs_covered, plan.pairs_total),
                     share_text(plan.pair_weight_covered, plan.pair_weight_total), pairwise,
                     plan.pairwise_chip_hours, plan.full_cover_chip_hours);
  out += fmt::format("  risk covered: {:.1f} of {:.1f} ({:.1f}%)\n", plan.risk_covered, plan.risk_total,
                     percent(plan.risk_covered, plan.risk_total));
  out += fmt::format("  skipped: {} cells, risk left uncovered {:.1f} ({:.1f}%)\n", plan.skipped_count,
                     plan.skipped_risk, percent(plan.skipped_risk, plan.risk_total));
  out += fmt::format("  rotation: {}; {} cells ({:.1f} chip-hours) due tonight\n", rotation_text(plan),
                     rotation, plan.rotation.due_tonight_chip_hours);
  for (const std::string& note : plan.notes) out += "  note: " + note + "\n";
  return out;
}

std::string plan_json_text(const Matrix& matrix, const Plan& plan, const std::vector<std::string>& sources) {
  nlohmann::json chosen = nlohmann::json::array();
  for (const PlannedCell& cell : plan.chosen) {
    nlohmann::json entry = cell_json(matrix, cell);
    entry["reason"] = std::string(to_string(cell.reason));
    chosen.push_back(std::move(entry));
  }
  nlohmann::json skipped_top = nlohmann::json::array();
  for (const PlannedCell& cell : plan.skipped_top) skipped_top.push_back(cell_json(matrix, cell));
  nlohmann::json missing_pairs = nlohmann::json::array();
  for (const MissingPair& pair : plan.missing_pairs) {
    missing_pairs.push_back({{"pair", pair.name}, {"weight", pair.weight}});
  }
  const Rotation& r = plan.rotation;
  const nlohmann::json doc{
      {"night", plan.night},
      {"budget_chip_hours", plan.budget_chip_hours},
      {"chip_hours", plan.chip_hours},
      {"cells_total", plan.cells_total},
      {"cells", chosen},
      {"pairs_total", plan.pairs_total},
      {"pairs_covered", plan.pairs_covered},
      {"pair_weight_total", plan.pair_weight_total},
      {"pair_weight_covered", plan.pair_weight_covered},
      {"missing_pairs", missing_pairs},
      {"pairwise_chip_hours", plan.pairwise_chip_hours},
      {"full_cover_chip_hours", plan.full_cover_chip_hours},
      {"risk_total", plan.risk_total},
      {"risk_covered", plan.risk_covered},
      {"skipped", {{"count", plan.skipped_count}, {"risk", plan.skipped_risk}, {"top", skipped_top}}},
      {"rotation",
       {{"nights", r.nights},
        {"promised_nights", r.promised_nights},
        {"within_promise", r.within_promise},
        {"capacity_chip_hours", r.capacity_chip_hours},
        {"due_tonight_chip_hours", r.due_tonight_chip_hours},
        {"due_unpaid_chip_hours", r.due_unpaid_chip_hours},
        {"full_rotation_chip_hours", plan.cost_total_chip_hours}}},
      {"notes", plan.notes},
      {"sources", sources},
  };
  return doc.dump(2) + "\n";
}

}  // namespace kiln::strategy
