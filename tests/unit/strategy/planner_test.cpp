#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>

#include "strategy/planner.h"

namespace {

using namespace kiln::strategy;

// A random matrix: 2 to 5 factors of 1 to 6 values, costs and weights spread over a decade.
Matrix random_matrix(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> factors(2, 5), values(1, 6);
  std::uniform_real_distribution<double> multiplier(0.2, 3.0), weight(0.5, 3.0), coin(0, 1);
  std::vector<Factor> out;
  const int n = factors(rng);
  for (int f = 0; f < n; ++f) {
    Factor factor{"f" + std::to_string(f), {}};
    const int k = values(rng);
    for (int v = 0; v < k; ++v) {
      factor.values.push_back({"v" + std::to_string(v), multiplier(rng), weight(rng), coin(rng) < 0.2});
    }
    out.push_back(std::move(factor));
  }
  return Matrix(std::move(out), 1.0, 3.0, 1.0, "");
}

// Pairs of values the cells cover, counted from the cells themselves.
std::size_t pairs_covered_by(const std::vector<PlannedCell>& cells) {
  std::set<std::tuple<std::size_t, std::uint32_t, std::size_t, std::uint32_t>> seen;
  for (const PlannedCell& c : cells) {
    for (std::size_t f = 0; f < c.cell.size(); ++f) {
      for (std::size_t g = f + 1; g < c.cell.size(); ++g) seen.insert({f, c.cell[f], g, c.cell[g]});
    }
  }
  return seen.size();
}

std::size_t pairs_in(const Matrix& m) {
  std::size_t total = 0;
  for (std::size_t f = 0; f < m.factors().size(); ++f) {
    for (std::size_t g = f + 1; g < m.factors().size(); ++g) total += m.factors()[f].values.size() * m.factors()[g].values.size();
  }
  return total;
}

std::vector<std::size_t> indices(const Plan& plan) {
  std::vector<std::size_t> out;
  for (const PlannedCell& c : plan.chosen) out.push_back(c.index);
  return out;
}

}  // namespace

TEST_CASE("on random matrices the plan never exceeds its budget and accounts for every cell") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const Matrix m = random_matrix(rng);
    PlanRequest request;
    request.budget_chip_hours = std::uniform_real_distribution<double>(0.0, 1.2)(rng) * m.total_cost();
    request.seed = rng();
    const Plan plan = plan_night(m, {}, request);
    double spent = 0;
    std::set<std::size_t> distinct;
    for (const PlannedCell& c : plan.chosen) {
      spent += m.cost(c.cell);
      distinct.insert(c.index);
      CHECK(m.index_of(c.cell) == c.index);
    }
    CHECK(distinct.size() == plan.chosen.size());
    CHECK(spent <= request.budget_chip_hours + 1e-9);
    CHECK(plan.chip_hours == doctest::Approx(spent));
    CHECK(plan.chosen.size() + plan.skipped_count == m.cell_count());
    CHECK(plan.risk_covered + plan.skipped_risk == doctest::Approx(plan.risk_total));
    CHECK(plan.pairs_covered == pairs_covered_by(plan.chosen));
    CHECK(plan.pairs_total == pairs_in(m));
    // What is skipped does not fit: the greedy fills the budget with every cell it can.
    if (plan.skipped_count > 0) {
      double cheapest_skipped = 1e300;
      std::set<std::size_t> chosen(distinct);
      for (std::size_t i = 0; i < m.cell_count(); ++i) {
        if (!chosen.contains(i)) cheapest_skipped = std::min(cheapest_skipped, m.cost(m.cell_at(i)));
      }
      CHECK(spent + cheapest_skipped > request.budget_chip_hours);
    }
    if (plan.pairs_covered < plan.pairs_total) CHECK_FALSE(plan.notes.empty());
  }
}

TEST_CASE("every pair is covered when the budget allows, also by a budget of the covering set alone") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const Matrix m = random_matrix(rng);
    PlanRequest request;
    request.seed = rng();
    // Each pair is in some cell no dearer than the dearest: this many pay for a cover.
    request.budget_chip_hours = static_cast<double>(pairs_in(m)) * m.max_cell_cost();
    const Plan plan = plan_night(m, {}, request);
    CHECK(plan.pairs_covered == plan.pairs_total);
    CHECK(pairs_covered_by(plan.chosen) == pairs_in(m));
    // The cover alone, with no money left for more, covers every pair too.
    PlanRequest tight = request;
    tight.budget_chip_hours = plan.pairwise_chip_hours + plan.rotation.due_tonight_chip_hours + m.max_cell_cost();
    if (plan.rotation.due_tonight_chip_hours == 0) {
      const Plan cover = plan_night(m, {}, tight);
      CHECK(cover.pairs_covered == cover.pairs_total);
    }
  }
}

TEST_CASE("the statement-sized cover is the smallest: one cell per pair of the two largest factors, 180") {
  std::vector<Factor> factors;
  for (auto [name, count] : {std::pair{"model", 15}, {"config", 12}, {"hw", 3}, {"sw", 8}, {"env", 4}}) {
    Factor factor{name, {}};
    for (int v = 0; v < count; ++v) factor.values.push_back({std::string(name) + std::to_string(v)});
    factors.push_back(std::move(factor));
  }
  const Matrix m(std::move(factors), 1.0, 3.0, 1.0, "");
  PlanRequest request;
  request.budget_chip_hours = 185;  // a cover and a few cells by risk: no rotation
  Plan plan = plan_night(m, {}, request);
  CHECK(plan.rotation.nights == 0);
  CHECK(plan.pairs_covered == plan.pairs_total);
  CHECK(plan.pairs_total == 653);
  CHECK(plan.full_cover_chip_hours == 180);
  const auto count = [](const Plan& p, ChoiceReason reason) {
    return std::count_if(p.chosen.begin(), p.chosen.end(), [&](const PlannedCell& c) { return c.reason == reason; });
  };
  // 15 x 12 pairs of the two largest factors, one per cell.
  CHECK(count(plan, ChoiceReason::pairwise) == 180);

  // With rotation cells first, the cover adds a cell for each model x config pair they left.
  request.budget_chip_hours = 200;
  plan = plan_night(m, {}, request);
  REQUIRE(plan.rotation.nights > 0);
  CHECK(plan.pairs_covered == plan.pairs_total);
  std::set<std::pair<std::uint32_t, std::uint32_t>> by_rotation;
  for (const PlannedCell& c : plan.chosen) {
    if (c.reason == ChoiceReason::rotation) by_rotation.insert({c.cell[0], c.cell[1]});
  }
  CHECK(count(plan, ChoiceReason::pairwise) == static_cast<std::ptrdiff_t>(180 - by_rotation.size()));
}

TEST_CASE("a short budget covers what it can, says so, and the heaviest pairs first") {
  std::vector<Factor> factors{{"a", {{"x", 1, 10}, {"y"}, {"z"}}}, {"b", {{"p", 1, 10}, {"q"}, {"r"}}}};
  const Matrix m(std::move(factors), 1.0, 3.0, 1.0, "");
  PlanRequest request;
  request.budget_chip_hours = 2;
  const Plan plan = plan_night(m, {}, request);
  REQUIRE(plan.chosen.size() == 2);
  CHECK(plan.chosen.front().cell == Cell{0, 0});  // x with p: weight 100
  CHECK(plan.pairs_covered == 2);
  REQUIRE_FALSE(plan.notes.empty());
  CHECK(plan.notes.back().find("covers 2 of 9 pairs") != std::string::npos);
  // The 7 pairs missing, by count and by name, the heaviest first: x and p weigh 10 each.
  REQUIRE(plan.missing_pairs.size() == 7);
  CHECK(plan.missing_pairs.front().weight == 10);
  CHECK(plan.missing_pairs.back().weight == 1);
  CHECK(plan.notes.back().find("7 pairs are missing: a=x x b=") != std::string::npos);
}

TEST_CASE("a share short of the whole never reads 100.0%, nor a share above nothing 0.0%") {
  CHECK(share_text(1, 1) == "100.0%");
  CHECK(share_text(0.9996, 1) == "99.9%");
  CHECK(share_text(0.0001, 1) == "0.1%");
  CHECK(share_text(0, 1) == "0.0%");
  CHECK(share_text(0.5, 1) == "50.0%");
}

TEST_CASE("the same seed gives the same plan; another seed may not") {
  std::mt19937_64 rng(13);
  bool any_differs = false;
  for (int trial = 0; trial < 100; ++trial) {
    const Matrix m = random_matrix(rng);
    PlanRequest request;
    request.budget_chip_hours = 0.3 * m.total_cost();
    request.seed = rng();
    CHECK(indices(plan_night(m, {}, request)) == indices(plan_night(m, {}, request)));
    PlanRequest other = request;
    other.seed = request.seed + 1;
    any_differs = any_differs || indices(plan_night(m, {}, other)) != indices(plan_night(m, {}, request));
  }
  CHECK(any_differs);
}

TEST_CASE("rotation: every cell runs within the nights the plan promises, a week when the budget pays for it") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const Matrix m = random_matrix(rng);
    PlanRequest request;
    request.seed = rng();
    // From a budget that pays for a week with room to spare to one that takes several weeks.
    request.budget_chip_hours =
        std::uniform_real_distribution<double>(0.04, 0.4)(rng) * m.total_cost() + pairs_in(m) * m.max_cell_cost();
    NightHistory history;
    history.first_night = 1;
    const Plan first = plan_night(m, history, request);
    REQUIRE(first.rotation.nights > 0);
    const std::uint32_t promised = first.rotation.nights;
    if (first.rotation.capacity_chip_hours * 7 >= m.total_cost()) CHECK(promised == 7);
    if (promised > 7) CHECK(first.rotation.capacity_chip_hours * 7 < m.total_cost());
    std::vector<std::int64_t> last(m.cell_count(), 0);  // night 0: before the first
    for (std::int64_t night = 1; night <= 3 * static_cast<std::int64_t>(promised); ++night) {
      request.night = night;
      const Plan plan = plan_night(m, history, request);
      CHECK(plan.rotation.nights == promised);
      CHECK(plan.rotation.due_unpaid_chip_hours == 0);
      CHECK(plan.chip_hours <= request.budget_chip_hours + 1e-9);
      for (const PlannedCell& c : plan.chosen) {
        CHECK(night - last[c.index] <= promised);
        last[c.index] = night;
        history.last_run_night[c.index] = night;
      }
    }
    const std::int64_t end = 3 * static_cast<std::int64_t>(promised);
    for (std::int64_t at : last) CHECK(end - at < promised);  // none waits longer at the end either
  }
}

TEST_CASE("age raises risk: a cell that ran last night weighs less than one never run") {
  std::vector<Factor> factors{{"a", {{"x"}, {"y"}}}, {"b", {{"p"}, {"q"}}}};
  const Matrix m(std::move(factors), 1.0, 3.0, 1.0, "");
  CHECK(cell_risk(m, {0, 0}, 1, 7) < cell_risk(m, {0, 0}, std::nullopt, 7));
  CHECK(cell_risk(m, {0, 0}, 7, 7) == doctest::Approx(cell_risk(m, {0, 0}, std::nullopt, 7)));
  CHECK(cell_risk(m, {0, 0}, 0, 7) == doctest::Approx(1.0));
}
