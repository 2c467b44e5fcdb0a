// The test matrix a night is planned over (docs/strategy.md): factors and their values, what a
// cell costs in chip-hours and how risky each value is. Read from matrix.toml's text; pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kiln::strategy {

struct FactorValue {
  std::string name;
  double cost_multiplier = 1.0;  // the cell's cost is base_chip_hours times every value's multiplier
  double risk_weight = 1.0;      // as written in the file, before changes and failures
  bool changed = false;          // touched by the changes since the last nightly
};

struct Factor {
  std::string name;
  std::vector<FactorValue> values;
};

// A cell: one value index per factor, in the matrix's factor order.
using Cell = std::vector<std::uint32_t>;

// What kiln's records say of the models: they override the file where they exist.
struct Evidence {
  std::map<std::string, double> chip_hours;     // by model: its latest measure job, chips x hours
  std::map<std::string, int> recent_failures;   // by model: failing verdicts of the last runs
};

class Matrix {
 public:
  static constexpr std::size_t kMaxCells = 2'000'000;
  static constexpr std::size_t kMaxValuesPerFactor = 1000;

  // Checks what the loader checks: at least two factors, distinct names, positive figures.
  Matrix(std::vector<Factor> factors, double base_chip_hours, double changed_risk, double failure_risk,
         std::string records_factor);

  const std::vector<Factor>& factors() const { return factors_; }
  std::size_t cell_count() const { return cell_count_; }
  Cell cell_at(std::size_t index) const;
  std::size_t index_of(const Cell& cell) const;
  // "model=llama-70b config=tp8 ..."
  std::string describe(const Cell& cell) const;
  std::optional<std::size_t> factor_index(std::string_view name) const;
  // The factor whose values are qualification models (records' costs and failures), if any.
  std::optional<std::size_t> records_factor() const { return records_factor_; }
  const std::string& records_factor_name() const { return records_factor_name_; }

  // The records' figures for the models named by the records factor. A model's recorded
  // chip-hours are its cost with every other factor at multiplier 1.
  void apply(const Evidence& evidence);

  // Each value's multiplier once records are applied (a recorded model's is its chip-hours over
  // base_chip_hours), so that a cell's cost is base times the product of these.
  double cost_multiplier(std::size_t factor, std::uint32_t value) const { return multipliers_[factor][value]; }
  // The value's weight: the file's, times changed_risk when changed, times (1 + failure_risk x
  // failures) for a model with recent failures.
  double risk_weight(std::size_t factor, std::uint32_t value) const { return weights_[factor][value]; }
  bool recorded_cost(std::size_t factor, std::uint32_t value) const;
  int recent_failures(std::size_t factor, std::uint32_t value) const;

  double cost(const Cell& cell) const;
  double base_risk(const Cell& cell) const;  // the product of its values' weights
  double total_cost() const;
  double max_cell_cost() const;

 private:
  void refresh();

  std::vector<Factor> factors_;
  double base_chip_hours_;
  double changed_risk_;
  double failure_risk_;
  std::string records_factor_name_;
  std::optional<std::size_t> records_factor_;
  std::size_t cell_count_ = 1;
  Evidence evidence_;
  std::vector<std::vector<double>> multipliers_;
  std::vector<std::vector<double>> weights_;
};

struct MatrixFile {
  Matrix matrix;
  std::uint32_t rotation_nights = 7;  // every cell runs at least once in this many nights, when paid for
};

// Parses matrix.toml's text; `source` names the file in errors ("source:line:column: what; what
// to do"), every problem of the file at once.
Result<MatrixFile> parse_matrix(std::string_view text, std::string_view source);

}  // namespace kiln::strategy
