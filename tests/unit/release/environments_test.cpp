#include "release/environments.h"

#include <doctest/doctest.h>

#include "tests/unit/release/release_samples.h"

namespace kiln::release {
namespace {

using testing::bundle_id;
using testing::bundle_text;
using testing::repo_files;

TEST_CASE("a repository snapshot reads bundles, environments and the matrix") {
  auto snapshot = read_snapshot(repo_files(bundle_id('a'), ""));
  REQUIRE(snapshot.has_value());
  CHECK(snapshot->bundles.size() == 4);
  const auto& bundle = snapshot->bundles.at(bundle_id('a'));
  CHECK(bundle.layers.at("firmware").version == "fw-2.1");
  CHECK(bundle.models.at(0).tensor_parallel == 8);
  CHECK(bundle.models.at(0).pipeline_parallel == 1);
  CHECK(snapshot->bundles.at(bundle_id('c')).one_way_firmware == "blows anti-rollback fuse 4");
  const auto& production = snapshot->environments.at("production");
  CHECK(production.follows == "staging");
  CHECK(production.soak_hours == 48);
  CHECK(production.eval_thresholds.at("llm-70b") == doctest::Approx(0.995));
  CHECK(production.approver_roles == std::vector<std::string>{"ops", "admin"});
  CHECK(snapshot->compatibility.combinations.size() == 2);

  auto desired = desired_state(*snapshot);
  CHECK(desired.at("dev").bundle->id == bundle_id('a'));
  CHECK(desired.at("dev").nodes == std::vector<std::string>{"n01"});
  CHECK_FALSE(desired.at("staging").bundle.has_value());
  CHECK(desired.at("production").node_labels == std::vector<std::string>{"pool=prod"});
}

TEST_CASE("a bad file is refused with its place and what to write") {
  auto unknown = parse_environment_file("bundle = \"\"\nsoak_hour = 3\n", "environments/x.toml", "x");
  REQUIRE_FALSE(unknown.has_value());
  CHECK(unknown.error().code == Errc::config);
  CHECK(unknown.error().message.find("environments/x.toml:2:1: unknown key 'soak_hour'") != std::string::npos);
  CHECK(unknown.error().message.find("did you mean 'soak_hours'") != std::string::npos);

  auto gate = parse_environment_file("bundle = \"\"\nrequires = [\"weekly\"]\n", "e.toml", "e");
  REQUIRE_FALSE(gate.has_value());
  CHECK(gate.error().message.find("smoke, nightly and release") != std::string::npos);

  auto digest = parse_bundle_file(bundle_text(bundle_id('a')).replace(bundle_text(bundle_id('a')).find("sha256:"), 8, "md5:"),
                                  "b.toml");
  REQUIRE_FALSE(digest.has_value());
  CHECK(digest.error().message.find("digest must be \"sha256:\"") != std::string::npos);

  auto files = repo_files(bundle_id('f'), "");
  auto missing = read_snapshot(files);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("bundles/" + bundle_id('f') + ".toml is missing") != std::string::npos);

  files = repo_files("", "");
  files["environments/dev.toml"] = "bundle = \"\"\nfollows = \"production\"\n";
  auto circle = read_snapshot(files);
  REQUIRE_FALSE(circle.has_value());
  CHECK(circle.error().message.find("goes round in a circle") != std::string::npos);

  files = repo_files("", "");
  files["bundles/wrong.toml"] = bundle_text(bundle_id('9'));
  auto misnamed = read_snapshot(files);
  REQUIRE_FALSE(misnamed.has_value());
  CHECK(misnamed.error().message.find("must be bundles/" + bundle_id('9') + ".toml") != std::string::npos);
}

TEST_CASE("a bundle file written by format_bundle_file reads back the same") {
  auto bundle = parse_bundle_file(bundle_text(bundle_id('c'), "fw-3.0", "one_way_firmware = \"blows \\\"fuse\\\" 4\"\n"),
                                  "bundles/c.toml");
  REQUIRE_MESSAGE(bundle.has_value(), bundle.error().message);
  const std::string text = format_bundle_file(*bundle);
  auto back = parse_bundle_file(text, "formatted.toml");
  REQUIRE_MESSAGE(back.has_value(), back.error().message << "\n" << text);
  CHECK(back->id == bundle->id);
  CHECK(back->hardware_revisions == bundle->hardware_revisions);
  CHECK(back->one_way_firmware == "blows \"fuse\" 4");
  CHECK(back->layers.at("firmware").version == "fw-3.0");
  CHECK(back->layers.at("firmware").digest == bundle->layers.at("firmware").digest);
  REQUIRE(back->models.size() == bundle->models.size());
  CHECK(back->models.at(0).tensor_parallel == bundle->models.at(0).tensor_parallel);
  CHECK(format_bundle_file(*back) == text);
}

TEST_CASE("with_bundle changes the bundle line only") {
  const std::string text = "# staging\nbundle = \"\"   # none yet\nfollows = \"dev\"\n[eval_thresholds]\nbundle = 1\n";
  auto changed = with_bundle(text, bundle_id('a'));
  REQUIRE(changed.has_value());
  CHECK(*changed == "# staging\nbundle = \"" + bundle_id('a') + "\"\nfollows = \"dev\"\n[eval_thresholds]\nbundle = 1\n");
  CHECK_FALSE(with_bundle("follows = \"dev\"\n", bundle_id('a')).has_value());
  CHECK_FALSE(with_bundle("bundles = 1\n", bundle_id('a')).has_value());
}

TEST_CASE("the compatibility matrix allows a stack per revision, with wildcards") {
  CHECK(version_allowed({"fw-2.*"}, "fw-2.1"));
  CHECK_FALSE(version_allowed({"fw-2.*"}, "fw-3.0"));
  CHECK(version_allowed({"*"}, "anything"));
  auto snapshot = read_snapshot(repo_files("", ""));
  REQUIRE(snapshot.has_value());
  CHECK(compatibility_problems(snapshot->compatibility, snapshot->bundles.at(bundle_id('a'))).empty());
  auto problems = compatibility_problems(snapshot->compatibility, snapshot->bundles.at(bundle_id('e')));
  REQUIRE(problems.size() == 2);
  CHECK(problems[0] == "on hardware revision a, no [[combination]] of compatibility.toml allows firmware fw-0.9 with "
                       "driver driver-1 and runtime runtime-1");
}

}  // namespace
}  // namespace kiln::release
