// A qualification run that cannot be carried out is not a failed model: the real kiln finds a
// role that may not submit the run's class, a missing or empty golden directory, an unreadable
// model set and an unwritable --junit path before the first job, with exit 2 or 3 (docs/cli.md).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/qualification_samples.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST_CASE("a run that cannot be carried out exits 2 or 3 before submitting a job") {
  Fleet fleet("run-checks");
  fleet.add_key("ci", "ci");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  const fs::path dir = fleet.dir();
  std::ofstream(dir / "models.toml") << kModelSet;
  std::ofstream(dir / "history.toml") << kHistory;
  fs::create_directories(dir / "golden");
  std::ofstream(dir / "golden" / "mlp-bf16.npy") << "not read before the run";
  fs::create_directories(dir / "empty-golden");
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--rev", "a", "--bundle-dir", (dir / "bundles").string()}, &out) == 0);
  const std::string bundle = out.substr(7, out.find(' ', 7) - 7);  // "bundle ID at change ..."

  const auto run = [&](const std::string& key, std::vector<std::string> changed) {
    std::vector<std::string> args = {"nightly", "--bundle", bundle, "--wait", "--model-set",
                                     (dir / "models.toml").string(), "--bundle-dir", (dir / "bundles").string(),
                                     "--golden-dir", (dir / "golden").string(), "--tickets-dir",
                                     (dir / "tickets").string()};
    for (std::size_t i = 0; i + 1 < changed.size(); i += 2) {
      auto it = std::find(args.begin(), args.end(), changed[i]);
      if (it == args.end()) {
        args.push_back(changed[i]);
        args.push_back(changed[i + 1]);
      } else {
        *(it + 1) = changed[i + 1];
      }
    }
    return fleet.kiln(key, args, &out);
  };

  CHECK(run("dev", {}) == 3);
  CHECK(contains(out, "has role developer, which may not submit nightly jobs, and a nightly run needs them"));
  CHECK(run("ci", {"--golden-dir", (dir / "no-golden").string()}) == 2);
  CHECK(contains(out, "no-golden is not a directory; give the directory of the models' golden references"));
  CHECK(run("ci", {"--golden-dir", (dir / "empty-golden").string()}) == 2);
  CHECK(contains(out, "empty-golden is empty; it must hold the models' golden references"));
  CHECK(run("ci", {"--model-set", (dir / "no-models.toml").string()}) == 2);
  CHECK(contains(out, "kiln: --model-set: "));
  CHECK(contains(out, "no-models.toml"));
  CHECK(run("ci", {"--junit", (dir / "no-such-dir" / "nightly.xml").string()}) == 2);
  CHECK(contains(out, "--junit " + (dir / "no-such-dir" / "nightly.xml").string() +
                          ": cannot write there (No such file or directory); give a path in a writable directory"));
  CHECK_FALSE(fs::exists(dir / "no-such-dir"));

  // The --junit check (before the role's) leaves no file behind, and nothing was submitted.
  CHECK(run("dev", {"--junit", (dir / "checked.xml").string()}) == 3);
  CHECK_FALSE(fs::exists(dir / "checked.xml"));
  REQUIRE(fleet.kiln("ci", {"jobs"}, &out) == 0);
  CHECK(out == "no jobs\n");
  REQUIRE(fleet.kiln("ci", {"runs"}, &out) == 0);
  CHECK(contains(out, "no qualification runs yet"));
}
