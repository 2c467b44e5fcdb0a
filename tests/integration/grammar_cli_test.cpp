// The kiln grammar as people type it (docs/cli.md), with the real binaries and no fleet: every
// binary's --version, a mistyped command, a bad duration or id, old spellings.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/integration/run_command.h"

using kiln::testing::bin;
using kiln::testing::contains;
using kiln::testing::run;

namespace {

// A client.toml pointing nowhere: commands that fail before connecting never notice.
const std::string kNoConfig = " --config /nonexistent/client.toml ";

}  // namespace

TEST_CASE("every binary answers --version with kiln's version and the protocol version") {
  // Every program the build makes (the test executables aside), so a new one cannot forget.
  std::vector<std::string> binaries;
  for (const auto& entry : std::filesystem::directory_iterator(KILN_BIN_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("kiln", 0) == 0) binaries.push_back(name);
  }
  CHECK(binaries.size() >= 12);
  for (const std::string& binary : binaries) {
    CAPTURE(binary);
    const auto ran = run(bin(binary) + " --version");
    CHECK(ran.status == 0);
    CHECK(ran.output == binary + " " + KILN_VERSION + " (protocol v1)\n");
  }
  // The agent's install subcommand keeps its own --version (the package's).
  const auto install = run(bin("kiln-agent") + " install --help");
  CHECK(install.status == 0);
  CHECK(contains(install.output, "the version the package installs"));
}

TEST_CASE("an unknown command says so, names the near ones and exits 2, with or without --help") {
  for (const std::string tail : {"", " --help"}) {
    const auto ran = run(bin("kiln") + " nods" + tail);
    CHECK(ran.status == 2);
    CHECK(contains(ran.output, "kiln: 'nods' is not a kiln command. Did you mean: nodes"));
  }
  const auto far = run(bin("kiln") + " --json frobnicate");
  CHECK(far.status == 2);
  CHECK(contains(far.output, "'frobnicate' is not a kiln command. `kiln --help` lists them all."));
  CHECK(run(bin("kiln") + " nodes --help").status == 0);
}

TEST_CASE("a command group needs one of its commands: a mistyped or missing one is a usage error naming them") {
  for (const std::string tail : {"", " --help"}) {
    const auto ran = run(bin("kiln") + kNoConfig + "change ad" + tail);
    CHECK(ran.status == 2);
    CHECK(contains(ran.output, "kiln: 'ad' is not a `kiln change` command. Did you mean: add? `kiln change --help` "
                               "lists them all."));
  }
  const auto bare = run(bin("kiln") + kNoConfig + "bundle");
  CHECK(bare.status == 2);
  CHECK(contains(bare.output, "kiln: `kiln bundle` needs a command: build, show, accept."));
  CHECK(run(bin("kiln") + " bundle --help").status == 0);
}

TEST_CASE("durations are 30m, 2h or 1h30m, and a bad one is a usage error naming the option") {
  const auto bad = run(bin("kiln") + kNoConfig + "lease --chips 1 --duration 2hours");
  CHECK(bad.status == 2);
  CHECK(contains(bad.output, "kiln: --duration 2hours: 'hours' is not a unit (ms, s, m, h or d); give a duration "
                             "such as 90s, 30m, 2h or 1h30m"));
  const auto bare = run(bin("kiln") + kNoConfig + "submit --workload sleep --timeout 30");
  CHECK(bare.status == 2);
  CHECK(contains(bare.output, "--timeout 30: a number needs a unit"));
  const auto missing = run(bin("kiln") + kNoConfig + "lease --chips 1");
  CHECK(missing.status == 2);
  CHECK(contains(missing.output, "say how long to hold the chips: --duration 2h"));
}

TEST_CASE("ids and nodes are positional; a missing or malformed one is a usage error") {
  const auto no_node = run(bin("kiln") + kNoConfig + "diag --level 2");
  CHECK(no_node.status == 2);
  CHECK(contains(no_node.output, "say which node to diagnose: kiln diag NODE"));
  const auto bad_id = run(bin("kiln") + kNoConfig + "queue X7");
  CHECK(bad_id.status == 2);
  CHECK(contains(bad_id.output, "'X7' is neither a job id (42, J42) nor a lease id (L3)"));
  CHECK(run(bin("kiln") + kNoConfig + "result L3").status == 2);
}

TEST_CASE("old spellings still parse for one release, hidden from help, with a notice on stderr") {
  // Past parsing, these reach the missing client.toml: exit 2 for the config, not for the spelling.
  const auto hours = run(bin("kiln") + kNoConfig + "lease --chips 1 --hours 1 --minutes 30");
  CHECK(contains(hours.output, "kiln: --hours is deprecated and goes away in the next release; use --duration 2h"));
  CHECK(contains(hours.output, "kiln: --minutes is deprecated"));
  CHECK(contains(hours.output, "/nonexistent/client.toml"));
  const auto why = run(bin("kiln") + kNoConfig + "queue --why L3");
  CHECK(contains(why.output, "kiln: --why is deprecated and goes away in the next release; use kiln queue ID"));
  CHECK(contains(why.output, "/nonexistent/client.toml"));
  const auto help = run(bin("kiln") + " lease --help");
  CHECK(help.status == 0);
  CHECK(contains(help.output, "--duration"));
  CHECK_FALSE(contains(help.output, "--hours"));
}
