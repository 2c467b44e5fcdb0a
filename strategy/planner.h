// Tonight's cells of a test matrix on a chip-hour budget (docs/strategy.md, "The matrix
// planner"): the cells rotation cannot put off, then a pairwise covering set (the grid cover of
// cover.h when the budget pays for it, else a cost-aware greedy, AETG-like, heaviest pairs
// first; seeded), then the rest of the budget by risk per chip-hour. Never over budget.
// Pure: the matrix, the history of nights and a seed in, a plan out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "strategy/matrix.h"

namespace kiln::strategy {

// Which nights each cell last ran, as the state file keeps it (plan_state.h).
struct NightHistory {
  std::int64_t first_night = 0;                        // the first night planned with this history
  std::map<std::size_t, std::int64_t> last_run_night;  // by cell index
};

struct PlanRequest {
  double budget_chip_hours = 0;
  std::int64_t night = 1;
  std::uint64_t seed = 1;
  std::uint32_t rotation_nights = 7;  // the promise when the budget pays for it
  std::size_t top_skipped = 10;       // how many skipped cells to list
  std::size_t candidates_per_row = 24;  // the covering construction's tries for each cell it adds
};

enum class ChoiceReason { rotation, pairwise, risk };
std::string_view to_string(ChoiceReason reason);

struct PlannedCell {
  std::size_t index = 0;
  Cell cell;
  ChoiceReason reason = ChoiceReason::risk;
  double chip_hours = 0;
  double risk = 0;
  std::int64_t age_nights = -1;  // since its last run; -1 never ran
};

// A rotation longer than this (ten years of nights) is no rotation.
constexpr std::uint32_t kMaxRotationNights = 3660;

struct Rotation {
  // Nights in which every cell runs at least once: rotation_nights when the budget pays for it,
  // more when it does not; 0 when it would take over kMaxRotationNights.
  std::uint32_t nights = 0;
  std::uint32_t promised_nights = 7;   // the request's rotation_nights
  bool within_promise = false;         // nights == promised_nights
  double capacity_chip_hours = 0;      // kept for rotation each night: budget - pairwise cover - one cell
  double due_tonight_chip_hours = 0;   // what tonight must run so that no cell misses its deadline
  double due_unpaid_chip_hours = 0;    // of that, what did not fit the budget (rotation falls behind)
};

// A pair of values no chosen cell covers: "model=llama-70b x hardware=gen1", and its risk weight.
struct MissingPair {
  std::string name;
  double weight = 0;
};

// How many missing pairs a plan's note names; the plan lists them all.
constexpr std::size_t kMissingPairsNamed = 10;

struct Plan {
  std::int64_t night = 1;
  double budget_chip_hours = 0;
  std::vector<PlannedCell> chosen;  // in the order chosen
  double chip_hours = 0;
  std::size_t pairs_total = 0;
  std::size_t pairs_covered = 0;
  double pair_weight_total = 0;
  double pair_weight_covered = 0;
  std::vector<MissingPair> missing_pairs;  // heaviest first
  double pairwise_chip_hours = 0;  // of chip_hours, spent on the covering set after the rotation's cells
  double full_cover_chip_hours = 0;  // what a covering set costs from nothing (no rotation cells first)
  double risk_total = 0;           // every cell's risk
  double risk_covered = 0;         // the chosen cells'
  std::size_t cells_total = 0;
  double cost_total_chip_hours = 0;  // every cell's cost: one full rotation
  std::vector<PlannedCell> skipped_top;  // the riskiest cells not chosen
  std::size_t skipped_count = 0;
  double skipped_risk = 0;
  Rotation rotation;
  std::vector<std::string> notes;  // what people must know: pairs left uncovered, rotation behind
};

// The risk a cell carries tonight: its values' weights times 1 + age / rotation nights (a cell
// never run counts as one rotation old).
double cell_risk(const Matrix& matrix, const Cell& cell, std::optional<std::int64_t> age_nights,
                 std::uint32_t rotation_nights);

// "99.9%": part of whole to a tenth of a percent, never "100.0%" while part falls short of it
// (nor "0.0%" for a part above 0), so a missing pair always shows.
std::string share_text(double part, double whole);

Plan plan_night(const Matrix& matrix, const NightHistory& history, const PlanRequest& request);

}  // namespace kiln::strategy
