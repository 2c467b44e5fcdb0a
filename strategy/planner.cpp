#include "strategy/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "strategy/cover.h"

namespace kiln::strategy {

std::string_view to_string(ChoiceReason reason) {
  switch (reason) {
    case ChoiceReason::rotation: return "rotation";
    case ChoiceReason::pairwise: return "pairwise";
    case ChoiceReason::risk: return "risk";
  }
  return "risk";
}

double cell_risk(const Matrix& matrix, const Cell& cell, std::optional<std::int64_t> age_nights,
                 std::uint32_t rotation_nights) {
  const double age = age_nights ? static_cast<double>(std::max<std::int64_t>(*age_nights, 0)) : rotation_nights;
  return matrix.base_risk(cell) * (1.0 + age / rotation_nights);
}

std::string share_text(double part, double whole) {
  if (!(whole > 0)) return "100.0%";
  double tenths = std::round(1000.0 * part / whole);
  if (part < whole) tenths = std::min(tenths, 999.0);
  if (part > 0) tenths = std::max(tenths, 1.0);
  return fmt::format("{:.1f}%", tenths / 10);
}

namespace {

// splitmix64: the same sequence on every platform for a seed (std's distributions are not).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

// The cost-aware greedy covering construction (after AETG): each cell added is the best of a
// few candidates by uncovered pair weight per chip-hour. A candidate starts from one uncovered
// pair (the heaviest for the first, random ones for the others) and fills the other factors in
// a random order, each with the value that covers the most uncovered weight per unit of its cost
// multiplier. When no candidate fits what is left of the budget, the cheapest cell holding the
// heaviest uncovered pair that still fits is taken, so a short budget covers the heaviest pairs.
class CoverBuilder {
 public:
  CoverBuilder(const Matrix& matrix, PairCover& pairs, std::uint64_t seed, std::size_t candidates)
      : matrix_(matrix), pairs_(pairs), rng_(seed), candidates_(std::max<std::size_t>(candidates, 1)) {
    by_weight_.resize(pairs.size());
    std::iota(by_weight_.begin(), by_weight_.end(), 0);
    std::stable_sort(by_weight_.begin(), by_weight_.end(),
                     [&](std::size_t x, std::size_t y) { return pairs.weight(x) > pairs.weight(y); });
  }

  // The next cell to add, or none when every pair is covered or nothing covering one fits.
  std::optional<Cell> next(double budget_left) {
    if (pairs_.uncovered() == 0) return std::nullopt;
    std::optional<Cell> best;
    double best_score = 0;
    double best_cost = 0;
    for (std::size_t c = 0; c < candidates_; ++c) {
      const std::size_t start = c == 0 ? heaviest_uncovered() : random_uncovered();
      Cell cell = fill(start);
      const double cost = matrix_.cost(cell);
      if (cost > budget_left) continue;
      const double score = pairs_.gain(cell) / cost;
      if (score > best_score || (score == best_score && best && cost < best_cost)) {
        best = std::move(cell);
        best_score = score;
        best_cost = cost;
      }
    }
    if (best) return best;
    return cheapest_fitting(budget_left);
  }

 private:
  std::size_t heaviest_uncovered() {
    while (pairs_.covered(by_weight_[heaviest_cursor_])) ++heaviest_cursor_;
    return by_weight_[heaviest_cursor_];
  }

  std::size_t random_uncovered() {
    std::size_t pair = rng_.below(pairs_.size());
    while (pairs_.covered(pair)) pair = (pair + 1) % pairs_.size();
    return pair;
  }

  Cell fill(std::size_t start) {
    const auto& factors = matrix_.factors();
    const auto& ends = pairs_.ends(start);
    Cell cell(factors.size(), 0);
    std::vector<bool> set(factors.size(), false);
    cell[ends.f] = ends.a;
    cell[ends.g] = ends.b;
    set[ends.f] = set[ends.g] = true;
    std::vector<std::size_t> order;
    for (std::size_t h = 0; h < factors.size(); ++h) {
      if (!set[h]) order.push_back(h);
    }
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng_.below(i)]);
    for (std::size_t h : order) {
      std::uint32_t chosen = 0;
      double chosen_score = -1;
      double chosen_multiplier = 0;
      for (std::uint32_t v = 0; v < factors[h].values.size(); ++v) {
        const double multiplier = matrix_.cost_multiplier(h, v);
        const double score = pairs_.gain(cell, set, h, v) / multiplier;
        if (score > chosen_score || (score == chosen_score && multiplier < chosen_multiplier)) {
          chosen = v;
          chosen_score = score;
          chosen_multiplier = multiplier;
        }
      }
      cell[h] = chosen;
      set[h] = true;
    }
    return cell;
  }

  std::optional<Cell> cheapest_fitting(double budget_left) const {
    const auto& factors = matrix_.factors();
    for (std::size_t pair : by_weight_) {
      if (pairs_.covered(pair)) continue;
      const auto& ends = pairs_.ends(pair);
      Cell cell(factors.size(), 0);
      for (std::size_t h = 0; h < factors.size(); ++h) {
        std::uint32_t cheapest = 0;
        for (std::uint32_t v = 1; v < factors[h].values.size(); ++v) {
          if (matrix_.cost_multiplier(h, v) < matrix_.cost_multiplier(h, cheapest)) cheapest = v;
        }
        cell[h] = cheapest;
      }
      cell[ends.f] = ends.a;
      cell[ends.g] = ends.b;
      if (matrix_.cost(cell) <= budget_left) return cell;
    }
    return std::nullopt;
  }

  const Matrix& matrix_;
  PairCover& pairs_;
  Rng rng_;
  std::size_t candidates_;
  std::vector<std::size_t> by_weight_;
  std::size_t heaviest_cursor_ = 0;
};

// What a covering set costs from nothing, with no budget: the planner keeps that much of each
// night for it.
double pairwise_cover_cost(const Matrix& matrix, std::uint64_t seed, std::size_t candidates) {
  PairCover pairs(matrix);
  double spent = 0;
  for (const Cell& cell : grid_cover(matrix, pairs, seed)) {
    spent += matrix.cost(cell);
    pairs.cover(cell);
  }
  CoverBuilder builder(matrix, pairs, seed, candidates);
  while (auto cell = builder.next(std::numeric_limits<double>::infinity())) {
    spent += matrix.cost(*cell);
    pairs.cover(*cell);
  }
  return spent;
}

struct CellFacts {
  double cost = 0;
  double risk = 0;
  std::optional<std::int64_t> age;
  std::int64_t deadline = 0;
};

}  // namespace

Plan plan_night(const Matrix& matrix, const NightHistory& history, const PlanRequest& request) {
  KILN_ASSERT(request.budget_chip_hours >= 0 && request.rotation_nights >= 1, "the command checks its arguments");
  Plan plan;
  plan.night = request.night;
  plan.budget_chip_hours = request.budget_chip_hours;
  plan.cells_total = matrix.cell_count();
  plan.cost_total_chip_hours = matrix.total_cost();

  // Rotation: what each night keeps for it, and so how many nights a full one takes.
  const double cover_cost = pairwise_cover_cost(matrix, request.seed, request.candidates_per_row);
  plan.full_cover_chip_hours = cover_cost;
  Rotation& rotation = plan.rotation;
  rotation.promised_nights = request.rotation_nights;
  rotation.capacity_chip_hours = std::max(0.0, request.budget_chip_hours - cover_cost - matrix.max_cell_cost());
  const double nights = rotation.capacity_chip_hours > 0
                           ? std::ceil(plan.cost_total_chip_hours / rotation.capacity_chip_hours)
                           : std::numeric_limits<double>::infinity();
  if (nights <= kMaxRotationNights) {
    rotation.nights = std::max(static_cast<std::uint32_t>(nights), request.rotation_nights);
    rotation.within_promise = rotation.nights == request.rotation_nights;
  }
  const std::uint32_t period = rotation.nights > 0 ? rotation.nights : request.rotation_nights;
  const std::int64_t first_night = history.first_night > 0 ? std::min(history.first_night, request.night)
                                                            : request.night;

  std::vector<CellFacts> facts(matrix.cell_count());
  for (std::size_t i = 0; i < facts.size(); ++i) {
    const Cell cell = matrix.cell_at(i);
    CellFacts& f = facts[i];
    f.cost = matrix.cost(cell);
    if (auto found = history.last_run_night.find(i); found != history.last_run_night.end()) {
      f.age = request.night - found->second;
      f.deadline = found->second + period;
    } else {
      f.deadline = first_night + period - 1;
    }
    f.deadline = std::max(f.deadline, request.night);  // one overdue runs tonight
    f.risk = cell_risk(matrix, cell, f.age, period);
    plan.risk_total += f.risk;
  }

  std::vector<bool> chosen(matrix.cell_count(), false);
  PairCover pairs(matrix);
  double spent = 0;
  const auto choose = [&](std::size_t index, const Cell& cell, ChoiceReason reason) {
    chosen[index] = true;
    spent += facts[index].cost;
    pairs.cover(cell);
    plan.chosen.push_back({index, cell, reason, facts[index].cost, facts[index].risk, facts[index].age.value_or(-1)});
  };

  // 1. Rotation (earliest deadline first): for every deadline d, what falls due by d beyond what
  // the nights after tonight can run (capacity each) must run tonight.
  if (rotation.nights > 0) {
    std::vector<std::size_t> by_deadline(facts.size());
    std::iota(by_deadline.begin(), by_deadline.end(), 0);
    std::stable_sort(by_deadline.begin(), by_deadline.end(), [&](std::size_t x, std::size_t y) {
      if (facts[x].deadline != facts[y].deadline) return facts[x].deadline < facts[y].deadline;
      return facts[x].risk / facts[x].cost > facts[y].risk / facts[y].cost;
    });
    double due = 0;
    double by_now = 0;
    for (std::size_t k = 0; k < by_deadline.size(); ++k) {
      by_now += facts[by_deadline[k]].cost;
      const bool last_of_deadline =
          k + 1 == by_deadline.size() || facts[by_deadline[k + 1]].deadline != facts[by_deadline[k]].deadline;
      if (!last_of_deadline) continue;
      const auto nights_after = static_cast<double>(facts[by_deadline[k]].deadline - request.night);
      due = std::max(due, by_now - nights_after * rotation.capacity_chip_hours);
    }
    rotation.due_tonight_chip_hours = due;
    double paid = 0;
    for (std::size_t index : by_deadline) {
      if (paid >= due) break;
      if (spent + facts[index].cost > request.budget_chip_hours) continue;
      paid += facts[index].cost;
      choose(index, matrix.cell_at(index), ChoiceReason::rotation);
    }
    rotation.due_unpaid_chip_hours = std::max(0.0, due - paid);
    if (rotation.due_unpaid_chip_hours > 0) {
      plan.notes.push_back(fmt::format(
          "rotation falls behind: {:.1f} chip-hours due tonight do not fit the budget; raise the budget or drop cells",
          rotation.due_unpaid_chip_hours));
    }
  } else {
    plan.notes.push_back(fmt::format(
        "no rotation: after the pairwise cover ({:.1f} chip-hours) and one cell ({:.1f}) the budget ({:.1f}) leaves "
        "too little for every cell to run within {} nights; cells outside the cover run by risk only",
        cover_cost, matrix.max_cell_cost(), request.budget_chip_hours, kMaxRotationNights));
  }

  // 2. The pairwise covering set, cheaply: the grid cover when the budget pays for it, then the
  // greedy for what it left; the greedy alone, heaviest pairs first, when it does not.
  const double before_cover = spent;
  const std::vector<Cell> grid = grid_cover(matrix, pairs, request.seed);
  double grid_cost = 0;
  for (const Cell& cell : grid) grid_cost += matrix.cost(cell);
  if (spent + grid_cost <= request.budget_chip_hours) {
    for (const Cell& cell : grid) choose(matrix.index_of(cell), cell, ChoiceReason::pairwise);
  }
  CoverBuilder builder(matrix, pairs, request.seed, request.candidates_per_row);
  while (auto cell = builder.next(request.budget_chip_hours - spent)) {
    const std::size_t index = matrix.index_of(*cell);
    KILN_ASSERT(!chosen[index], "a chosen cell covers no new pair");
    choose(index, *cell, ChoiceReason::pairwise);
  }
  plan.pairwise_chip_hours = spent - before_cover;

  // 3. The rest by risk per chip-hour, every cell that still fits.
  std::vector<std::size_t> by_value;
  for (std::size_t i = 0; i < facts.size(); ++i) {
    if (!chosen[i]) by_value.push_back(i);
  }
  std::stable_sort(by_value.begin(), by_value.end(), [&](std::size_t x, std::size_t y) {
    return facts[x].risk / facts[x].cost > facts[y].risk / facts[y].cost;
  });
  for (std::size_t index : by_value) {
    if (spent + facts[index].cost <= request.budget_chip_hours) choose(index, matrix.cell_at(index), ChoiceReason::risk);
  }
  plan.chip_hours = spent;

  // The pairs covered, and those missing by name, heaviest first: a budget short of a full cover
  // says which pairs of values no cell ran tonight.
  plan.pairs_total = pairs.size();
  plan.pairs_covered = pairs.size() - pairs.uncovered();
  plan.pair_weight_total = pairs.total_weight();
  plan.pair_weight_covered = pairs.covered_weight();
  std::vector<std::size_t> missing;
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    if (!pairs.covered(p)) missing.push_back(p);
  }
  std::stable_sort(missing.begin(), missing.end(),
                   [&](std::size_t x, std::size_t y) { return pairs.weight(x) > pairs.weight(y); });
  for (std::size_t p : missing) plan.missing_pairs.push_back({pairs.describe(p), pairs.weight(p)});
  if (!missing.empty()) {
    std::string named;
    for (std::size_t k = 0; k < std::min(missing.size(), kMissingPairsNamed); ++k) {
      named += fmt::format("{}{}", k == 0 ? "" : ", ", pairs.describe(missing[k]));
    }
    if (missing.size() > kMissingPairsNamed) named += fmt::format(" and {} more", missing.size() - kMissingPairsNamed);
    plan.notes.push_back(fmt::format(
        "the budget covers {} of {} pairs ({} of their risk weight), the heaviest first; {} pair{} missing: {}; a full "
        "cover costs about {:.1f} chip-hours",
        plan.pairs_covered, plan.pairs_total, share_text(plan.pair_weight_covered, plan.pair_weight_total),
        missing.size(), missing.size() == 1 ? " is" : "s are", named, cover_cost));
  }

  // What is left, the riskiest first.
  std::vector<std::size_t> skipped;
  for (std::size_t i = 0; i < facts.size(); ++i) {
    if (chosen[i]) {
      plan.risk_covered += facts[i].risk;
    } else {
      skipped.push_back(i);
      plan.skipped_risk += facts[i].risk;
    }
  }
  plan.skipped_count = skipped.size();
  const std::size_t top = std::min(request.top_skipped, skipped.size());
  std::partial_sort(skipped.begin(), skipped.begin() + static_cast<std::ptrdiff_t>(top), skipped.end(),
                    [&](std::size_t x, std::size_t y) {
                      return facts[x].risk != facts[y].risk ? facts[x].risk > facts[y].risk : x < y;
                    });
  for (std::size_t k = 0; k < top; ++k) {
    const std::size_t i = skipped[k];
    plan.skipped_top.push_back(
        {i, matrix.cell_at(i), ChoiceReason::risk, facts[i].cost, facts[i].risk, facts[i].age.value_or(-1)});
  }
  return plan;
}

}  // namespace kiln::strategy
