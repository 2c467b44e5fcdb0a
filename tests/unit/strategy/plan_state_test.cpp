#include <doctest/doctest.h>

#include "strategy/plan_state.h"

namespace {

using namespace kiln::strategy;

Matrix small_matrix(std::vector<std::string> hardware) {
  std::vector<Factor> factors{{"model", {{"a"}, {"b"}}}, {"hw", {}}};
  for (auto& name : hardware) factors[1].values.push_back({name});
  return Matrix(std::move(factors), 1.0, 3.0, 1.0, "");
}

}  // namespace

TEST_CASE("the state file keeps each cell's last night by its values, across a changed matrix") {
  const Matrix m = small_matrix({"g1", "g2"});
  PlanState state;
  PlanRequest request;
  request.budget_chip_hours = 2;
  request.night = 4;
  const Plan plan = plan_night(m, history_of(state, m), request);
  REQUIRE(record_plan(state, m, plan, "s.json").has_value());
  CHECK(state.first_night == 4);
  CHECK(state.last_night == 4);

  auto read = parse_plan_state(plan_state_text(state), "s.json");
  REQUIRE(read.has_value());
  CHECK(read->last_run == state.last_run);
  // A value added: the old cells keep their nights, at their new indices.
  const Matrix grown = small_matrix({"g0", "g1", "g2"});
  const NightHistory history = history_of(*read, grown);
  CHECK(history.last_run_night.size() == plan.chosen.size());
  for (const PlannedCell& c : plan.chosen) {
    Cell moved = c.cell;
    moved[1] += 1;
    CHECK(history.last_run_night.at(grown.index_of(moved)) == 4);
  }
  // Nights go forward.
  auto again = record_plan(state, m, plan, "s.json");
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().message == "s.json has night 4 recorded already; nights go forward: give --night 5 or more, or "
                                 "another --state file");
}

TEST_CASE("a state file that is not one is refused, saying what to do") {
  CHECK(parse_plan_state("", "s.json")->last_run.empty());
  for (const char* text : {"[1]", "{\"first_night\": 1}", "not json", "{\"first_night\": 3, \"last_night\": 2, \"cells\": []}"}) {
    auto parsed = parse_plan_state(text, "s.json");
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().message.find("s.json: ") == 0);
    CHECK(parsed.error().message.find("remove this one to start rotation afresh") != std::string::npos);
  }
}
