// The pairs of a test matrix's values and a cheap set of cells covering them (docs/strategy.md,
// "The pairwise cover"). Pure: the matrix, what is covered already and a seed in, cells out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "strategy/matrix.h"

namespace kiln::strategy {

// Every pair of values of two factors, each with a weight (the product of the two values'), and
// which of them the cells chosen so far cover.
class PairCover {
 public:
  explicit PairCover(const Matrix& matrix);

  struct Ends {
    std::size_t f, g;
    std::uint32_t a, b;
  };

  std::size_t size() const { return weights_.size(); }
  std::size_t uncovered() const { return uncovered_; }
  double total_weight() const { return total_weight_; }
  double covered_weight() const { return covered_weight_; }
  bool covered(std::size_t pair) const { return covered_[pair]; }
  double weight(std::size_t pair) const { return weights_[pair]; }
  const Ends& ends(std::size_t pair) const { return ends_[pair]; }
  std::size_t id(std::size_t f, std::uint32_t a, std::size_t g, std::uint32_t b) const;
  // "model=llama-70b x hardware=gen1"
  std::string describe(std::size_t pair) const;

  // The weight of the uncovered pairs value v of factor h makes with the values set in `cell`.
  double gain(const Cell& cell, const std::vector<bool>& set, std::size_t h, std::uint32_t v) const;
  double gain(const Cell& cell) const;
  void cover(const Cell& cell);

 private:
  const Matrix& matrix_;
  std::vector<std::vector<std::size_t>> offsets_;
  std::vector<double> weights_;
  std::vector<Ends> ends_;
  std::vector<bool> covered_;
  std::size_t uncovered_ = 0;
  double total_weight_ = 0;
  double covered_weight_ = 0;
};

// Cells that cover, with what `pairs` covers already, every pair of values of the two factors
// with the most values: one cell for each such pair still uncovered, which no cover can do with
// fewer. Their other factors are set so that the cells also cover every other pair they can, as
// cheaply as they can: a greedy fill, then simulated annealing (seeded) over the cells' cost
// plus a penalty for each pair left uncovered, moving one value of a cell or swapping one
// factor's values between two cells. Pairs it leaves uncovered are the caller's to cover.
std::vector<Cell> grid_cover(const Matrix& matrix, const PairCover& pairs, std::uint64_t seed);

}  // namespace kiln::strategy
