#include "strategy/matrix.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/toml_errors.h"

namespace kiln::strategy {

Matrix::Matrix(std::vector<Factor> factors, double base_chip_hours, double changed_risk, double failure_risk,
               std::string records_factor)
    : factors_(std::move(factors)),
      base_chip_hours_(base_chip_hours),
      changed_risk_(changed_risk),
      failure_risk_(failure_risk),
      records_factor_name_(std::move(records_factor)) {
  KILN_ASSERT(factors_.size() >= 2, "pairwise coverage needs two factors at least");
  KILN_ASSERT(base_chip_hours_ > 0 && changed_risk_ > 0 && failure_risk_ >= 0, "the loader checks the figures");
  for (const Factor& factor : factors_) {
    KILN_ASSERT(!factor.values.empty() && factor.values.size() <= kMaxValuesPerFactor, "the loader checks the values");
    KILN_ASSERT(cell_count_ <= kMaxCells / factor.values.size(), "the loader checks the matrix's size");
    cell_count_ *= factor.values.size();
  }
  if (!records_factor_name_.empty()) {
    records_factor_ = factor_index(records_factor_name_);
    KILN_ASSERT(records_factor_.has_value(), "the loader checks records_factor");
  }
  refresh();
}

std::optional<std::size_t> Matrix::factor_index(std::string_view name) const {
  for (std::size_t f = 0; f < factors_.size(); ++f) {
    if (factors_[f].name == name) return f;
  }
  return std::nullopt;
}

Cell Matrix::cell_at(std::size_t index) const {
  KILN_ASSERT(index < cell_count_, "a cell of the matrix");
  Cell cell(factors_.size());
  // Mixed radix with the last factor varying fastest.
  for (std::size_t f = factors_.size(); f-- > 0;) {
    const std::size_t radix = factors_[f].values.size();
    cell[f] = static_cast<std::uint32_t>(index % radix);
    index /= radix;
  }
  return cell;
}

std::size_t Matrix::index_of(const Cell& cell) const {
  std::size_t index = 0;
  for (std::size_t f = 0; f < factors_.size(); ++f) index = index * factors_[f].values.size() + cell[f];
  return index;
}

std::string Matrix::describe(const Cell& cell) const {
  std::string text;
  for (std::size_t f = 0; f < factors_.size(); ++f) {
    if (f > 0) text += ' ';
    text += fmt::format("{}={}", factors_[f].name, factors_[f].values[cell[f]].name);
  }
  return text;
}

void Matrix::apply(const Evidence& evidence) {
  evidence_ = evidence;
  refresh();
}

bool Matrix::recorded_cost(std::size_t factor, std::uint32_t value) const {
  return records_factor_ == factor && evidence_.chip_hours.contains(factors_[factor].values[value].name);
}

int Matrix::recent_failures(std::size_t factor, std::uint32_t value) const {
  if (records_factor_ != factor) return 0;
  auto found = evidence_.recent_failures.find(factors_[factor].values[value].name);
  return found == evidence_.recent_failures.end() ? 0 : found->second;
}

void Matrix::refresh() {
  multipliers_.assign(factors_.size(), {});
  weights_.assign(factors_.size(), {});
  for (std::size_t f = 0; f < factors_.size(); ++f) {
    for (std::uint32_t v = 0; v < factors_[f].values.size(); ++v) {
      const FactorValue& value = factors_[f].values[v];
      double multiplier = value.cost_multiplier;
      if (recorded_cost(f, v)) {
        // A job that measured nothing (0 ms) still costs something to start.
        multiplier = std::max(evidence_.chip_hours.at(value.name), 1e-3) / base_chip_hours_;
      }
      multipliers_[f].push_back(multiplier);
      double weight = value.risk_weight * (value.changed ? changed_risk_ : 1.0);
      weight *= 1.0 + failure_risk_ * recent_failures(f, v);
      weights_[f].push_back(weight);
    }
  }
}

double Matrix::cost(const Cell& cell) const {
  double cost = base_chip_hours_;
  for (std::size_t f = 0; f < factors_.size(); ++f) cost *= multipliers_[f][cell[f]];
  return cost;
}

double Matrix::base_risk(const Cell& cell) const {
  double risk = 1.0;
  for (std::size_t f = 0; f < factors_.size(); ++f) risk *= weights_[f][cell[f]];
  return risk;
}

double Matrix::total_cost() const {
  // The sum over every cell of a product is the product of the per-factor sums.
  double total = base_chip_hours_;
  for (const auto& values : multipliers_) {
    double sum = 0;
    for (double m : values) sum += m;
    total *= sum;
  }
  return total;
}

double Matrix::max_cell_cost() const {
  double most = base_chip_hours_;
  for (const auto& values : multipliers_) most *= *std::max_element(values.begin(), values.end());
  return most;
}

// ---- matrix.toml ----

namespace {

constexpr std::string_view kRemedy = "fix the matrix file (docs/strategy.md, \"The matrix file\")";

// "; did you mean 'y'?" for a near miss, else "; the WHAT are a, b, c".
std::string near_or_list(std::string_view name, const std::vector<std::string_view>& names, std::string_view what) {
  if (auto near = config::nearest_name(name, names)) return fmt::format("; did you mean '{}'?", *near);
  return fmt::format("; the {} are {}", what, fmt::join(names, ", "));
}

std::optional<double> number_of(const toml::node& node) {
  if (auto d = node.value<double>()) return *d;
  return std::nullopt;
}

// A `cost` or `risk` table of a factor: value name -> positive number.
void read_value_table(const toml::table& factor_table, std::string_view key, Factor& factor,
                      config::Problems& problems, double FactorValue::*field) {
  const toml::node* node = factor_table.get(key);
  if (!node) return;
  const toml::table* table = node->as_table();
  if (!table) {
    problems.at(node->source(), fmt::format("'{}' of factor '{}' must be a table of value = number, such as "
                                            "{} = {{ \"{}\" = 2.0 }}",
                                            key, factor.name, key, factor.values.front().name));
    return;
  }
  std::vector<std::string_view> names;
  for (const FactorValue& value : factor.values) names.push_back(value.name);
  for (const auto& [name, entry] : *table) {
    auto found = std::find_if(factor.values.begin(), factor.values.end(),
                              [&](const FactorValue& value) { return value.name == name.str(); });
    if (found == factor.values.end()) {
      problems.at(name.source(), fmt::format("'{}' in {} of factor '{}' is not one of its values{}", name.str(), key,
                                             factor.name, near_or_list(name.str(), names, "values")));
      continue;
    }
    auto number = number_of(entry);
    if (!number || !(*number > 0) || !std::isfinite(*number)) {
      problems.at(entry.source(), fmt::format("{} of '{}' (factor '{}') must be a number above 0", key, name.str(),
                                              factor.name));
      continue;
    }
    (*found).*field = *number;
  }
}

std::optional<Factor> read_factor(const toml::table& table, std::size_t position, config::Problems& problems) {
  problems.unknown_keys(table, "a [[factor]]", {"name", "values", "cost", "risk", "changed"});
  Factor factor;
  const auto name = table["name"].value<std::string>();
  if (!name || name->empty()) {
    problems.at(table.source(), fmt::format("factor {} has no name; give name = \"model\" or the like", position + 1));
    return std::nullopt;
  }
  factor.name = *name;
  const toml::array* values = table["values"].as_array();
  if (!values || values->empty()) {
    problems.at(table.source(), fmt::format("factor '{}' has no values; give values = [\"a\", \"b\", ...]", factor.name));
    return std::nullopt;
  }
  if (values->size() > Matrix::kMaxValuesPerFactor) {
    problems.at(values->source(), fmt::format("factor '{}' has {} values, more than {}; split it or drop some",
                                              factor.name, values->size(), Matrix::kMaxValuesPerFactor));
    return std::nullopt;
  }
  std::set<std::string> seen;
  for (const toml::node& entry : *values) {
    const auto value = entry.value<std::string>();
    if (!value || value->empty()) {
      problems.at(entry.source(), fmt::format("the values of factor '{}' must be non-empty strings", factor.name));
      return std::nullopt;
    }
    if (!seen.insert(*value).second) {
      problems.at(entry.source(), fmt::format("factor '{}' lists '{}' twice; list each value once", factor.name, *value));
      return std::nullopt;
    }
    factor.values.push_back(FactorValue{*value});
  }
  read_value_table(table, "cost", factor, problems, &FactorValue::cost_multiplier);
  read_value_table(table, "risk", factor, problems, &FactorValue::risk_weight);
  if (const toml::node* changed = table.get("changed")) {
    const toml::array* list = changed->as_array();
    if (!list) {
      problems.at(changed->source(), fmt::format("'changed' of factor '{}' must be a list of its values", factor.name));
    } else {
      std::vector<std::string_view> names;
      for (const FactorValue& value : factor.values) names.push_back(value.name);
      for (const toml::node& entry : *list) {
        const auto value = entry.value<std::string>();
        auto found = std::find_if(factor.values.begin(), factor.values.end(),
                                  [&](const FactorValue& v) { return value && v.name == *value; });
        if (found == factor.values.end()) {
          problems.at(entry.source(),
                      fmt::format("'changed' of factor '{}' names '{}', not one of its values{}", factor.name,
                                  value.value_or("?"), near_or_list(value.value_or(""), names, "values")));
          continue;
        }
        found->changed = true;
      }
    }
  }
  return factor;
}

// A top-level number: `fallback` when absent, a problem when not above `minimum` (or below, with
// `inclusive`).
double read_number(const toml::table& doc, std::string_view key, double fallback, double minimum, bool inclusive,
                   config::Problems& problems) {
  const toml::node* node = doc.get(key);
  if (!node) return fallback;
  auto number = number_of(*node);
  const bool ok = number && std::isfinite(*number) && (inclusive ? *number >= minimum : *number > minimum);
  if (!ok) {
    problems.at(node->source(), fmt::format("{} must be a number {} {}", key, inclusive ? "of at least" : "above", minimum));
    return fallback;
  }
  return *number;
}

}  // namespace

Result<MatrixFile> parse_matrix(std::string_view text, std::string_view source) {
  auto parsed = config::parse_toml(text, source, kRemedy);
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& doc = *parsed;
  config::Problems problems{std::string(source)};
  problems.unknown_keys(doc, "the matrix file",
                        {"base_chip_hours", "changed_risk", "failure_risk", "rotation_nights", "records_factor", "factor"});
  const double base = read_number(doc, "base_chip_hours", 1.0, 0.0, false, problems);
  const double changed_risk = read_number(doc, "changed_risk", 3.0, 0.0, false, problems);
  const double failure_risk = read_number(doc, "failure_risk", 1.0, 0.0, true, problems);
  const double rotation = read_number(doc, "rotation_nights", 7.0, 1.0, true, problems);
  if (std::floor(rotation) != rotation || rotation > 366) {
    problems.at(doc.get("rotation_nights")->source(), "rotation_nights must be a whole number of nights, 1 to 366");
  }

  std::vector<Factor> factors;
  const toml::array* list = doc["factor"].as_array();
  if (!list || list->size() < 2) {
    problems.add("the matrix needs two [[factor]] tables at least (name and values each): pairwise coverage is of "
                 "pairs of factors");
  }
  if (list) {
    std::size_t cells = 1;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::table* table = (*list)[i].as_table();
      if (!table) {
        problems.at((*list)[i].source(), "each factor must be a [[factor]] table");
        continue;
      }
      auto factor = read_factor(*table, i, problems);
      if (!factor) continue;
      if (std::any_of(factors.begin(), factors.end(), [&](const Factor& f) { return f.name == factor->name; })) {
        problems.at(table->source(), fmt::format("two factors are named '{}'; name each once", factor->name));
        continue;
      }
      if (cells > Matrix::kMaxCells / factor->values.size()) {
        problems.at(table->source(), fmt::format("with factor '{}' the matrix has more than {} cells; plan a smaller "
                                                 "matrix (fewer values, or one factor less)",
                                                 factor->name, Matrix::kMaxCells));
        continue;
      }
      cells *= factor->values.size();
      factors.push_back(std::move(*factor));
    }
  }
  std::string records_factor;
  if (const toml::node* node = doc.get("records_factor")) {
    records_factor = node->value<std::string>().value_or("");
    std::vector<std::string_view> names;
    for (const Factor& f : factors) names.push_back(f.name);
    if (std::find(names.begin(), names.end(), records_factor) == names.end()) {
      problems.at(node->source(), fmt::format("records_factor '{}' is not a factor{}", records_factor,
                                              near_or_list(records_factor, names, "factors")));
    }
  }
  if (auto ok = problems.status(); !ok) return tl::unexpected(ok.error());
  return MatrixFile{Matrix(std::move(factors), base, changed_risk, failure_risk, std::move(records_factor)),
                    static_cast<std::uint32_t>(rotation)};
}

}  // namespace kiln::strategy
