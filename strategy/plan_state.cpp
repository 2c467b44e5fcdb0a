#include "strategy/plan_state.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::strategy {

namespace {

std::map<std::string, std::string> values_of(const Matrix& matrix, const Cell& cell) {
  std::map<std::string, std::string> values;
  for (std::size_t f = 0; f < cell.size(); ++f) {
    values[matrix.factors()[f].name] = matrix.factors()[f].values[cell[f]].name;
  }
  return values;
}

}  // namespace

Result<PlanState> parse_plan_state(std::string_view text, std::string_view source) {
  PlanState state;
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return state;
  const auto bad = [&](std::string_view what) {
    return fail(Errc::config, fmt::format("{}: {}; this is the state file `kiln plan --record` writes: give another "
                                          "--state file, or remove this one to start rotation afresh",
                                          source, what));
  };
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return bad("not a JSON object");
  try {
    state.first_night = doc.at("first_night").get<std::int64_t>();
    state.last_night = doc.at("last_night").get<std::int64_t>();
    for (const auto& entry : doc.at("cells")) {
      state.last_run[entry.at("values").get<std::map<std::string, std::string>>()] = entry.at("night").get<std::int64_t>();
    }
  } catch (const nlohmann::json::exception& error) {
    return bad(fmt::format("not a plan state ({})", error.what()));
  }
  if (state.first_night > state.last_night) return bad("first_night comes after last_night");
  return state;
}

std::string plan_state_text(const PlanState& state) {
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& [values, night] : state.last_run) cells.push_back({{"values", values}, {"night", night}});
  return nlohmann::json{{"first_night", state.first_night}, {"last_night", state.last_night}, {"cells", cells}}.dump(1) +
         "\n";
}

NightHistory history_of(const PlanState& state, const Matrix& matrix) {
  NightHistory history;
  history.first_night = state.first_night;
  if (state.last_run.empty()) return history;
  // Look each of the matrix's cells up by its values: the state may name cells the matrix lost.
  for (std::size_t i = 0; i < matrix.cell_count(); ++i) {
    auto found = state.last_run.find(values_of(matrix, matrix.cell_at(i)));
    if (found != state.last_run.end()) history.last_run_night[i] = found->second;
  }
  return history;
}

Status record_plan(PlanState& state, const Matrix& matrix, const Plan& plan, std::string_view source) {
  if (state.first_night > 0 && plan.night <= state.last_night) {
    return fail(Errc::invalid_argument, fmt::format("{} has night {} recorded already; nights go forward: give --night {} or "
                                            "more, or another --state file",
                                            source, state.last_night, state.last_night + 1));
  }
  if (state.first_night == 0) state.first_night = plan.night;
  state.last_night = plan.night;
  for (const PlannedCell& planned : plan.chosen) state.last_run[values_of(matrix, planned.cell)] = plan.night;
  return {};
}

}  // namespace kiln::strategy
