#include <doctest/doctest.h>

#include <string>

#include "strategy/matrix.h"

namespace {

using kiln::strategy::parse_matrix;

const char* kTwoFactors = R"(
base_chip_hours = 2.0
records_factor = "model"

[[factor]]
name = "model"
values = ["big", "small"]
cost = { "big" = 4.0, "small" = 0.5 }
risk = { "big" = 2.0 }
changed = ["small"]

[[factor]]
name = "hardware"
values = ["gen1", "gen2", "gen3"]
)";

std::string error_of(const std::string& text) {
  auto parsed = parse_matrix(text, "m.toml");
  REQUIRE_FALSE(parsed.has_value());
  return parsed.error().message;
}

}  // namespace

TEST_CASE("a matrix file gives each cell its cost and each value its weight") {
  auto file = parse_matrix(kTwoFactors, "m.toml");
  REQUIRE(file.has_value());
  const auto& m = file->matrix;
  CHECK(m.cell_count() == 6);
  CHECK(file->rotation_nights == 7);
  CHECK(m.cost({0, 0}) == doctest::Approx(8.0));
  CHECK(m.cost({1, 2}) == doctest::Approx(1.0));
  CHECK(m.total_cost() == doctest::Approx(3 * (8.0 + 1.0)));
  CHECK(m.max_cell_cost() == doctest::Approx(8.0));
  CHECK(m.risk_weight(0, 0) == doctest::Approx(2.0));
  CHECK(m.risk_weight(0, 1) == doctest::Approx(3.0));  // changed: the default changed_risk
  CHECK(m.describe({1, 2}) == "model=small hardware=gen3");
  for (std::size_t i = 0; i < m.cell_count(); ++i) CHECK(m.index_of(m.cell_at(i)) == i);
}

TEST_CASE("records replace a model's cost and raise its weight by its recent failures") {
  auto file = parse_matrix(kTwoFactors, "m.toml");
  REQUIRE(file.has_value());
  auto& m = file->matrix;
  m.apply({{{"small", 3.0}, {"not-in-the-matrix", 9.0}}, {{"big", 2}}});
  CHECK(m.recorded_cost(0, 1));
  CHECK_FALSE(m.recorded_cost(0, 0));
  CHECK(m.cost({1, 0}) == doctest::Approx(3.0));  // the recorded chip-hours, other factors at 1
  CHECK(m.cost({0, 0}) == doctest::Approx(8.0));
  CHECK(m.recent_failures(0, 0) == 2);
  CHECK(m.risk_weight(0, 0) == doctest::Approx(2.0 * 3.0));  // 1 + failure_risk x 2
}

TEST_CASE("a wrong matrix file is refused with file:line:column, what is wrong and what to do") {
  CHECK(error_of("base_chip_hours = [") .find("m.toml:1:") == 0);
  CHECK(error_of("[[factor]]\nname = \"a\"\nvalues = [\"x\"]\n").find("two [[factor]] tables at least") !=
        std::string::npos);
  const std::string many = error_of(R"(
base_chip_hours = -1
rotation_night = 7
[[factor]]
name = "model"
values = ["a", "b", "a"]
[[factor]]
name = "hw"
values = ["g1", "g2"]
cost = { "g3" = 2.0, "g1" = 0 }
changed = ["g4"]
[[factor]]
name = "hw"
values = ["x"]
)");
  CHECK(many.find("m.toml:2:19: base_chip_hours must be a number above 0") != std::string::npos);
  CHECK(many.find("m.toml:3:1: unknown key 'rotation_night' in the matrix file; did you mean 'rotation_nights'?") !=
        std::string::npos);
  CHECK(many.find("m.toml:6:21: factor 'model' lists 'a' twice") != std::string::npos);
  CHECK(many.find("'g3' in cost of factor 'hw' is not one of its values; did you mean 'g1'?") != std::string::npos);
  CHECK(many.find("cost of 'g1' (factor 'hw') must be a number above 0") != std::string::npos);
  CHECK(many.find("'changed' of factor 'hw' names 'g4', not one of its values") != std::string::npos);
  CHECK(many.find("two factors are named 'hw'") != std::string::npos);
  CHECK(error_of("records_factor = \"models\"\n[[factor]]\nname = \"model\"\nvalues = [\"a\"]\n[[factor]]\nname = "
                 "\"b\"\nvalues = [\"c\"]\n")
            .find("m.toml:1:18: records_factor 'models' is not a factor; did you mean 'model'?") != std::string::npos);
  CHECK(error_of("records_factor = \"hw\"\n[[factor]]\nname = \"model\"\nvalues = [\"a\"]\n[[factor]]\nname = "
                 "\"b\"\nvalues = [\"c\"]\n")
            .find("records_factor 'hw' is not a factor; the factors are model, b") != std::string::npos);
  CHECK(error_of("rotation_nights = 2.5\n[[factor]]\nname = \"a\"\nvalues = [\"x\"]\n[[factor]]\nname = \"b\"\n"
                 "values = [\"y\"]\n")
            .find("rotation_nights must be a whole number of nights") != std::string::npos);
  CHECK(error_of("[[factor]]\nvalues = [\"x\"]\n[[factor]]\nname = \"b\"\nvalues = []\n").find("factor 1 has no name") !=
        std::string::npos);
}
