// A qualification run that cannot be carried out is not a failed model: the real kiln refuses a
// key that may not ask for runs and an unwritable --junit path, and kiln-qualifier refuses a
// missing or empty golden directory, an unreadable model set and a key that may not submit the
// runs' jobs, each with exit 2 or 3 (docs/cli.md, docs/operations.md) and before any job.
#include <doctest/doctest.h>

#include <sys/wait.h>

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
  fleet.add_qualifier("qualifier");
  fleet.add_qualifier("no-golden", {{"golden_dir", "\"no-golden\""}});
  fleet.add_qualifier("empty-golden", {{"golden_dir", "\"empty-golden\""}});
  fleet.add_qualifier("no-models", {{"model_set", "\"no-models.toml\""}});
  fleet.add_qualifier("developer", {{"secret_key_file", "\"dev.key\""}});
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

  // The client: a key that may not ask for runs, a --junit file it cannot write.
  CHECK(fleet.kiln("dev", {"nightly", "--bundle", bundle, "--wait"}, &out) == 3);
  CHECK(contains(out, "role developer may not write run_request records"));
  const std::string junit = (dir / "no-such-dir" / "nightly.xml").string();
  CHECK(fleet.kiln("ci", {"nightly", "--bundle", bundle, "--wait", "--junit", junit}, &out) == 2);
  CHECK(contains(out, "--junit " + junit + ": cannot write there (No such file or directory); give a path in a "
                                          "writable directory"));
  CHECK_FALSE(fs::exists(dir / "no-such-dir"));
  // The --junit check (before the role's) leaves no file behind.
  CHECK(fleet.kiln("dev", {"nightly", "--bundle", bundle, "--wait", "--junit", (dir / "checked.xml").string()}, &out) ==
        3);
  CHECK_FALSE(fs::exists(dir / "checked.xml"));

  // The qualifier: what its config names must be there, and its key must be a CI key.
  const auto check_config = [&](const std::string& name) {
    return run(bin("kiln-qualifier") + " --config " + fleet.qualifier_config(name).string() + " check-config");
  };
  Ran checked = check_config("qualifier");
  CHECK(checked.status == 0);
  CHECK(contains(checked.output, "OK"));
  checked = check_config("no-golden");
  CHECK(checked.status == 2);
  CHECK(contains(checked.output, "no-golden is not a directory; give the directory of the models' golden references"));
  checked = check_config("empty-golden");
  CHECK(checked.status == 2);
  CHECK(contains(checked.output, "empty-golden is empty; it must hold the models' golden references"));
  checked = check_config("no-models");
  CHECK(checked.status == 2);
  CHECK(contains(checked.output, "model_set: "));
  CHECK(contains(checked.output, "no-models.toml"));
  fleet.start_qualifier("developer");
  REQUIRE(Fleet::eventually([&] { return contains(fleet.log_of("developer"), "has role developer"); }, 30s));
  CHECK(contains(fleet.log_of("developer"), "which may not submit"));

  REQUIRE(fleet.kiln("ci", {"jobs"}, &out) == 0);
  CHECK(out == "no jobs\n");
  REQUIRE(fleet.kiln("ci", {"runs"}, &out) == 0);
  CHECK(contains(out, "no qualification runs yet"));
}
