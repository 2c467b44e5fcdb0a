// Bundle builders: the sim builder writes the stack file the workloads read; the command
// builder runs a configured program and trusts only a bundle that is exactly the changes asked.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qualification/shell/bundle_builder.h"
#include "tests/support/temp_dir.h"

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

std::vector<q::Change> history() {
  std::vector<q::Change> changes;
  for (int i = 0; i < 4; ++i) {
    q::Change c;
    c.id = "c" + std::to_string(i);
    c.layer = q::Layer::kernels;
    c.owner_team = "kernels-team";
    c.components = {"gemm-bf16"};
    c.merged_at_ms = i;
    changes.push_back(c);
  }
  changes[2].sim_effect = q::SimChangeEffect{{{"mlp-fp8", 0.97}}, {"gemm-bf16"}, {}};
  return changes;
}

std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A builder program: prints a line of chatter, then `json` as its last JSON line; exits `code`.
std::string script(const kiln::testing::TempDir& dir, const std::string& name, const std::string& json, int code) {
  const std::string path = dir.write(name, "#!/bin/sh\necho \"building $1 into $2\"\necho '" + json + "'\nexit " +
                                               std::to_string(code) + "\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("the sim builder makes the bundle at a change and writes its stack file") {
  kiln::testing::TempDir dir("kiln-builder");
  auto builder = qs::make_sim_builder(dir / "bundles", q::SimBuilderOptions{});
  auto bundle = builder->build(history(), 2);
  REQUIRE_MESSAGE(bundle.has_value(), bundle.error().message);
  CHECK(bundle->id == q::build_bundle_at(history(), 2)->id);
  const std::string stack = read(qs::stack_effects_path(dir / "bundles", bundle->id));
  CHECK(stack == *q::sim_stack_effects_toml(history(), 2));
  CHECK(stack.find("\"mlp-fp8\" = 0.97") != std::string::npos);
  CHECK(stack.find("gemm-bf16") != std::string::npos);
  CHECK_FALSE(builder->build(history(), 9).has_value());
}

TEST_CASE("the command builder runs its program and checks the bundle it prints") {
  kiln::testing::TempDir dir("kiln-builder");
  const auto expected = q::build_bundle_at(history(), 1);
  REQUIRE(expected.has_value());
  q::CommandBuilderConfig config;
  config.args = {"{change}", "{out}"};

  config.program = script(dir, "good.sh", q::to_json(*expected).dump(), 0);
  auto built = qs::make_command_builder(config, dir / "work")->build(history(), 1);
  REQUIRE_MESSAGE(built.has_value(), built.error().message);
  CHECK(built->id == expected->id);

  // A bundle of other changes than asked for is refused.
  config.program = script(dir, "wrong.sh", q::to_json(*q::build_bundle_at(history(), 3)).dump(), 0);
  auto wrong = qs::make_command_builder(config, dir / "work")->build(history(), 1);
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().code == kiln::Errc::integrity);

  // A bundle that lists its changes (kiln.bundle/1) is refused, with what to print instead: the
  // builder's bundles would outgrow a record as the history grows.
  q::Bundle listing = *expected;
  listing.listed_change_ids = std::vector<std::string>{history()[0].id, history()[1].id};
  config.program = script(dir, "listing.sh", q::to_json(q::seal(listing)).dump(), 0);
  auto listed = qs::make_command_builder(config, dir / "work")->build(history(), 1);
  REQUIRE_FALSE(listed.has_value());
  CHECK(listed.error().message.find("print kiln.bundle/2") != std::string::npos);

  // A tampered id is refused.
  auto tampered_json = q::to_json(*expected);
  tampered_json["id"] = std::string(64, '0');
  config.program = script(dir, "tampered.sh", tampered_json.dump(), 0);
  CHECK_FALSE(qs::make_command_builder(config, dir / "work")->build(history(), 1).has_value());

  // A failing build names the program and where its output is.
  config.program = script(dir, "fails.sh", "{}", 3);
  auto failed = qs::make_command_builder(config, dir / "work")->build(history(), 1);
  REQUIRE_FALSE(failed.has_value());
  CHECK(failed.error().message.find("fails.sh") != std::string::npos);

  config.program = script(dir, "silent.sh", "no json here", 0);
  auto silent = qs::make_command_builder(config, dir / "work")->build(history(), 1);
  REQUIRE_FALSE(silent.has_value());
  CHECK(silent.error().message.find("printed no bundle") != std::string::npos);
}
