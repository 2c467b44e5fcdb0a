#include "strategy/cover.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "common/stats/rng.h"

namespace kiln::strategy {

PairCover::PairCover(const Matrix& matrix) : matrix_(matrix) {
  const auto& factors = matrix.factors();
  offsets_.assign(factors.size(), std::vector<std::size_t>(factors.size(), 0));
  for (std::size_t f = 0; f < factors.size(); ++f) {
    for (std::size_t g = f + 1; g < factors.size(); ++g) {
      offsets_[f][g] = weights_.size();
      for (std::uint32_t a = 0; a < factors[f].values.size(); ++a) {
        for (std::uint32_t b = 0; b < factors[g].values.size(); ++b) {
          weights_.push_back(matrix.risk_weight(f, a) * matrix.risk_weight(g, b));
          ends_.push_back({f, g, a, b});
        }
      }
    }
  }
  covered_.assign(weights_.size(), false);
  uncovered_ = weights_.size();
  total_weight_ = std::accumulate(weights_.begin(), weights_.end(), 0.0);
}

std::size_t PairCover::id(std::size_t f, std::uint32_t a, std::size_t g, std::uint32_t b) const {
  if (f > g) {
    std::swap(f, g);
    std::swap(a, b);
  }
  return offsets_[f][g] + a * matrix_.factors()[g].values.size() + b;
}

std::string PairCover::describe(std::size_t pair) const {
  const Ends& e = ends_[pair];
  const auto& factors = matrix_.factors();
  return fmt::format("{}={} x {}={}", factors[e.f].name, factors[e.f].values[e.a].name, factors[e.g].name,
                     factors[e.g].values[e.b].name);
}

double PairCover::gain(const Cell& cell, const std::vector<bool>& set, std::size_t h, std::uint32_t v) const {
  double sum = 0;
  for (std::size_t f = 0; f < cell.size(); ++f) {
    if (f == h || !set[f]) continue;
    const std::size_t pair = id(f, cell[f], h, v);
    if (!covered_[pair]) sum += weights_[pair];
  }
  return sum;
}

double PairCover::gain(const Cell& cell) const {
  double sum = 0;
  for (std::size_t f = 0; f < cell.size(); ++f) {
    for (std::size_t g = f + 1; g < cell.size(); ++g) {
      const std::size_t pair = id(f, cell[f], g, cell[g]);
      if (!covered_[pair]) sum += weights_[pair];
    }
  }
  return sum;
}

void PairCover::cover(const Cell& cell) {
  for (std::size_t f = 0; f < cell.size(); ++f) {
    for (std::size_t g = f + 1; g < cell.size(); ++g) {
      const std::size_t pair = id(f, cell[f], g, cell[g]);
      if (covered_[pair]) continue;
      covered_[pair] = true;
      --uncovered_;
      covered_weight_ += weights_[pair];
    }
  }
}

namespace {

// Moves tried per cell and free factor: enough on the statement's matrix (180 cells, 3 free
// factors) to come within 1% of the cheapest cover in about 100 ms.
constexpr std::size_t kMovesPerValue = 600;

// The cells of a grid cover while annealing: how many times each pair is covered (the pairs
// covered before count once, for good), the cells' cost, and the pairs no cell covers.
class Annealer {
 public:
  Annealer(const Matrix& matrix, const PairCover& pairs, std::vector<Cell> cells, std::vector<std::size_t> free)
      : matrix_(matrix), pairs_(pairs), cells_(std::move(cells)), free_(std::move(free)) {
    counts_.assign(pairs.size(), 0);
    for (std::size_t p = 0; p < pairs.size(); ++p) counts_[p] = pairs.covered(p) ? 1 : 0;
    for (const Cell& cell : cells_) add(cell, +1);
    for (const Cell& cell : cells_) cost_ += matrix.cost(cell);
    for (int c : counts_) missing_ += c == 0 ? 1 : 0;
  }

  double cost() const { return cost_; }
  std::size_t missing() const { return missing_; }
  const std::vector<Cell>& cells() const { return cells_; }

  // Sets factor h of cell r to v; returns the change in cost.
  double set(std::size_t r, std::size_t h, std::uint32_t v) {
    Cell& cell = cells_[r];
    const double before = matrix_.cost(cell);
    for (std::size_t f = 0; f < cell.size(); ++f) {
      if (f == h) continue;
      const std::size_t old_pair = pairs_.id(f, cell[f], h, cell[h]);
      if (--counts_[old_pair] == 0) ++missing_;
    }
    cell[h] = v;
    for (std::size_t f = 0; f < cell.size(); ++f) {
      if (f == h) continue;
      const std::size_t new_pair = pairs_.id(f, cell[f], h, v);
      if (counts_[new_pair]++ == 0) --missing_;
    }
    const double delta = matrix_.cost(cell) - before;
    cost_ += delta;
    return delta;
  }

  // Anneals cost + penalty x missing pairs, keeping the best state with the fewest missing.
  void anneal(stats::Rng& rng, std::size_t moves) {
    if (free_.empty() || cells_.empty()) return;
    const double mean_cost = cost_ / static_cast<double>(cells_.size());
    const double penalty = 4 * matrix_.max_cell_cost();
    const double start = 0.2 * mean_cost;
    const double end = 1e-4 * mean_cost;
    const double cooling = std::pow(end / start, 1.0 / static_cast<double>(moves));
    double temperature = start;
    std::vector<Cell> best = cells_;
    std::size_t best_missing = missing_;
    double best_cost = cost_;
    const auto energy = [&] { return cost_ + penalty * static_cast<double>(missing_); };
    for (std::size_t move = 0; move < moves; ++move, temperature *= cooling) {
      const std::size_t h = free_[rng.below(free_.size())];
      const auto values = static_cast<std::uint32_t>(matrix_.factors()[h].values.size());
      const std::size_t r = rng.below(cells_.size());
      const double before = energy();
      const std::uint32_t old_value = cells_[r][h];
      const bool swap = rng.bernoulli(0.5);
      std::size_t other = r;
      if (swap) {
        other = rng.below(cells_.size());
        if (cells_[other][h] == old_value) continue;
        const std::uint32_t other_value = cells_[other][h];
        set(r, h, other_value);
        set(other, h, old_value);
      } else {
        if (values < 2) continue;
        auto v = static_cast<std::uint32_t>(rng.below(values - 1));
        if (v >= old_value) ++v;
        set(r, h, v);
      }
      const double delta = energy() - before;
      if (delta <= 0 || rng.uniform01() < std::exp(-delta / temperature)) {
        if (missing_ < best_missing || (missing_ == best_missing && cost_ < best_cost - 1e-12)) {
          best = cells_;
          best_missing = missing_;
          best_cost = cost_;
        }
        continue;
      }
      if (swap) {
        const std::uint32_t moved = cells_[r][h];
        set(other, h, moved);
        set(r, h, old_value);
      } else {
        set(r, h, old_value);
      }
    }
    cells_ = std::move(best);
  }

 private:
  void add(const Cell& cell, int sign) {
    for (std::size_t f = 0; f < cell.size(); ++f) {
      for (std::size_t g = f + 1; g < cell.size(); ++g) counts_[pairs_.id(f, cell[f], g, cell[g])] += sign;
    }
  }

  const Matrix& matrix_;
  const PairCover& pairs_;
  std::vector<Cell> cells_;
  std::vector<std::size_t> free_;
  std::vector<int> counts_;
  double cost_ = 0;
  std::size_t missing_ = 0;
};

}  // namespace

std::vector<Cell> grid_cover(const Matrix& matrix, const PairCover& pairs, std::uint64_t seed) {
  const auto& factors = matrix.factors();
  std::vector<std::size_t> by_size(factors.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t x, std::size_t y) {
    return factors[x].values.size() > factors[y].values.size();
  });
  const std::size_t first = std::min(by_size[0], by_size[1]);
  const std::size_t second = std::max(by_size[0], by_size[1]);
  std::vector<std::size_t> free(by_size.begin() + 2, by_size.end());

  // A greedy fill first: each cell's free factors, in turn, take the value covering the most
  // uncovered pair weight per unit of cost multiplier, as the cells before left them.
  PairCover filling = pairs;
  std::vector<Cell> cells;
  for (std::uint32_t a = 0; a < factors[first].values.size(); ++a) {
    for (std::uint32_t b = 0; b < factors[second].values.size(); ++b) {
      if (pairs.covered(pairs.id(first, a, second, b))) continue;
      Cell cell(factors.size(), 0);
      std::vector<bool> set(factors.size(), false);
      cell[first] = a;
      cell[second] = b;
      set[first] = set[second] = true;
      for (std::size_t h : free) {
        std::uint32_t chosen = 0;
        double chosen_score = -1;
        for (std::uint32_t v = 0; v < factors[h].values.size(); ++v) {
          const double score = filling.gain(cell, set, h, v) / matrix.cost_multiplier(h, v);
          if (score > chosen_score) {
            chosen = v;
            chosen_score = score;
          }
        }
        cell[h] = chosen;
        set[h] = true;
      }
      filling.cover(cell);
      cells.push_back(std::move(cell));
    }
  }
  std::size_t free_values = 0;
  for (std::size_t h : free) free_values += factors[h].values.size();
  Annealer annealer(matrix, pairs, std::move(cells), free);
  stats::Rng rng(seed);
  annealer.anneal(rng, kMovesPerValue * annealer.cells().size() * std::max<std::size_t>(free_values, 1) / 4);
  return annealer.cells();
}

}  // namespace kiln::strategy
