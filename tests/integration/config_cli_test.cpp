// The real binaries' answers to bad configuration: kiln-coordinator and kiln-agent check-config
// and start-up, and kiln, each naming the file and line to fix, with the documented exit status.
// No coordinator runs: every case fails before one would be needed.
#include <doctest/doctest.h>

#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <sstream>
#include <string>
#include <vector>

#include "common/keys.h"
#include "tests/integration/run_command.h"
#include "tests/support/temp_dir.h"

using kiln::testing::Ran;
using kiln::testing::TempDir;
using kiln::testing::bin;
using kiln::testing::contains;
using kiln::testing::run;

namespace {

void make_keys(const TempDir& dir, const std::string& name) {
  auto keys = kiln::generate_keypair();
  REQUIRE(keys.has_value());
  REQUIRE(kiln::write_keypair(dir.file(name), *keys).has_value());
}

// Line 2: agent_endpoint, 3: client_endpoint, 4: secret_key_file, 5: log_level.
std::string coordinator_toml(const std::string& agent_endpoint, const std::string& secret_key_file,
                             const std::string& log_level) {
  return "[coordinator]\nagent_endpoint = \"" + agent_endpoint + "\"\nclient_endpoint = \"tcp://127.0.0.1:7602\"\n" +
         "secret_key_file = \"" + secret_key_file + "\"\nlog_level = \"" + log_level + "\"\ndatabase = \"kiln.db\"\n";
}

}  // namespace

TEST_CASE("kiln-coordinator check-config refuses what the coordinator could not use, naming file and line") {
  TempDir dir("kiln-config-coordinator");
  make_keys(dir, "coordinator");
  const std::string file = dir.file("coordinator.toml");
  const auto check = [&](const std::string& text) {
    dir.write("coordinator.toml", text);
    return run(bin("kiln-coordinator") + " --config " + file + " check-config");
  };

  const Ran good = check(coordinator_toml("tcp://0.0.0.0:7601", "coordinator.key", "info"));
  CHECK(good.status == 0);
  CHECK(contains(good.output, "OK"));

  const Ran wraps = check(coordinator_toml("tcp://0.0.0.0:70000", "coordinator.key", "info"));
  CHECK(wraps.status == 2);
  CHECK(contains(wraps.output, file + ":2:1: agent_endpoint \"tcp://0.0.0.0:70000\" must use a port between 1 and "
                                      "65535"));

  const Ran no_port = check(coordinator_toml("tcp://0.0.0.0", "coordinator.key", "info"));
  CHECK(no_port.status == 2);
  CHECK(contains(no_port.output, file + ":2:1: agent_endpoint \"tcp://0.0.0.0\" must name a port"));

  const Ran level = check(coordinator_toml("tcp://0.0.0.0:7601", "coordinator.key", "loud"));
  CHECK(level.status == 2);
  CHECK(contains(level.output, file + ":5:1: log_level 'loud' is not one of trace, debug, info"));

  const Ran no_key = check(coordinator_toml("tcp://0.0.0.0:7601", "missing.key", "info"));
  CHECK(no_key.status == 2);
  CHECK(contains(no_key.output, file + ":4:1: secret_key_file: cannot read secret key file " + dir.file("missing.key")));
  CHECK(contains(no_key.output, "kiln keygen --out coordinator"));

  const Ran typo = check(coordinator_toml("tcp://0.0.0.0:7601", "coordinator.key", "info") + "databse = \"x.db\"\n");
  CHECK(typo.status == 2);
  CHECK(contains(typo.output, file + ":7:1: unknown key 'databse' in [coordinator]; did you mean 'database'?"));

  // The register whose approvers may waive is read at start: its own mistakes name its file and
  // line, a good one is said with its teams.
  const std::string with_register =
      coordinator_toml("tcp://0.0.0.0:7601", "coordinator.key", "info") + "risk_register = \"risks.toml\"\n";
  const std::string risk = "[[risk]]\nid = \"tiles\"\ntitle = \"t\"\nowner_team = \"kernels\"\nlayer = \"kernels\"\n"
                           "tier = \"nightly\"\ngate = { model = \"m\", metric = \"throughput\" }\n"
                           "page = { team = \"kernels\", severity = \"sev3\" }\n";
  dir.write("risks.toml", "model_set = \"set.toml\"\n[[team]]\nname = \"kernels\"\napprovers = [\"mei\"]\n" + risk);
  const Ran registered = check(with_register);
  CHECK(registered.status == 0);
  CHECK(contains(registered.output, "waiver approvers   the [[team]]s of " + dir.file("risks.toml") + " (1 team)"));
  dir.write("risks.toml", "model_set = \"set.toml\"\n[[team]]\nname = \"kernels\"\napprover = [\"mei\"]\n" + risk);
  const Ran misspelt = check(with_register);
  CHECK(misspelt.status == 2);
  CHECK(contains(misspelt.output, dir.file("risks.toml") + ":4:1: unknown key 'approver'"));
  CHECK(contains(good.output, "waiver approvers   none: no waiver is taken"));

  // Starting with a missing key file fails the same way, before anything else happens, and is a
  // configuration error: a restart cannot fix it.
  dir.write("coordinator.toml", coordinator_toml("tcp://127.0.0.1:7601", "missing.key", "info"));
  const Ran start = run(bin("kiln-coordinator") + " --config " + file);
  CHECK(start.status == 2);
  CHECK(contains(start.output, file + ":4:1: secret_key_file: cannot read secret key file"));
  CHECK_FALSE(std::filesystem::exists(dir.file("kiln.db")));
}

// The lines of `output` that name a place in `file`.
std::vector<std::string> problem_lines(const std::string& output, const std::string& file) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(file + ":", 0) == 0) lines.push_back(line);
  }
  return lines;
}

// One run of `command` names every expected problem of `file`, in order, and exits 2.
void check_every_problem(const std::string& command, const std::string& file, const std::vector<std::string>& expected) {
  CAPTURE(command);
  const Ran ran = run(command);
  CHECK(ran.status == 2);
  const std::vector<std::string> lines = problem_lines(ran.output, file);
  REQUIRE(lines.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(contains(lines[i], expected[i]));
  CHECK(contains(ran.output, std::to_string(expected.size()) + " problem(s) in " + file));
}

TEST_CASE("kiln-coordinator check-config reports every problem in one run, and the coordinator refuses the same") {
  TempDir dir("kiln-config-all");
  const std::string file = dir.file("coordinator.toml");
  dir.write("coordinator.toml",
            "[coordinator]\n"
            "agent_endpoint = \"tcp://0.0.0.0\"\n"              // 2: no port
            "client_endpoint = \"tcp://127.0.0.1:70000\"\n"     // 3: port over 65535
            "secret_key_file = \"missing.key\"\n"               // 4: no such file
            "log_level = \"loud\"\n"                            // 5: not a level
            "database = \"no-such-dir/kiln.db\"\n"              // 6: its directory is missing
            "databse = \"x.db\"\n"                              // 7: a typo
            "\n[scheduler]\n"
            "gace_ms = 2000\n");                                 // 10: a typo of a scheduler key
  const std::vector<std::string> expected = {
      file + ":2:1: agent_endpoint \"tcp://0.0.0.0\" must name a port",
      file + ":3:1: client_endpoint \"tcp://127.0.0.1:70000\" must use a port between 1 and 65535",
      file + ":4:1: secret_key_file: cannot read secret key file " + dir.file("missing.key"),
      file + ":5:1: log_level 'loud' is not one of trace, debug, info, warn, error, critical, off",
      file + ":6:1: database " + dir.file("no-such-dir/kiln.db") + ": the directory " + dir.file("no-such-dir") +
          " does not exist",
      file + ":7:1: unknown key 'databse' in [coordinator]; did you mean 'database'?",
      file + ":10:11: [scheduler] gace_ms: unknown key; did you mean 'grace_ms'?",
  };
  for (const std::string& command : {" --config " + file + " check-config", " check-config --config " + file,
                                     " --config " + file}) {
    check_every_problem(bin("kiln-coordinator") + command, file, expected);
  }
  CHECK_FALSE(std::filesystem::exists(dir.file("no-such-dir")));

  // Several problems in one [scheduler] table are each reported, with their lines.
  make_keys(dir, "coordinator");
  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[scheduler]\n"
                                "grace_ms = -1\npolicy = \"lifo\"\n[scheduler.target_start_latency_ms]\n"
                                "presubmit = 0\nweekly = 5\n");
  const Ran scheduler = run(bin("kiln-coordinator") + " --config " + file + " check-config");
  CHECK(scheduler.status == 2);
  const std::vector<std::string> lines = problem_lines(scheduler.output, file);
  REQUIRE(lines.size() == 3);
  CHECK(contains(lines[0], file + ":5:12: [scheduler] grace_ms: must be at least 0"));
  CHECK(contains(lines[1], file + ":6:10: [scheduler] policy: expected"));
  CHECK(contains(lines[2], file + ":9:10: [scheduler] target_start_latency_ms.weekly: unknown class 'weekly'"));
}

TEST_CASE("kiln-agent check-config reports every problem in one run, file and named files alike") {
  TempDir dir("kiln-config-agent-all");
  make_keys(dir, "coordinator");
  const std::string file = dir.file("agent.toml");
  dir.write("agent.toml",
            "node_id = \"n 07\"\n"                        // 1: not a name
            "work_dir = \"work\"\n"
            "secret_key_file = \"missing.key\"\n"         // 3: no such file
            "log_level = \"loud\"\n"                      // 4: not a level
            "[coordinator]\n"
            "endpoint = \"tcp://coord\"\n"                // 6: no port
            "public_key_file = \"coordinator.pub\"\n"
            "[driver]\n"
            "library = \"no-such-driver.so\"\n"           // 9: no such file
            "[knobs]\n"
            "heartbeat_interval_ms = 0\n"                 // 11: out of range
            "kill_grace = 100\n"                          // 12: a typo
            "[local_socket]\n"
            "group = \"root\"\n");
  const std::vector<std::string> expected = {
      file + ":1:1: node_id must be 1 to 64 letters",
      file + ":4:1: log_level \"loud\" is not one of trace, debug, info, warn, error, critical, off",
      file + ":6:1: endpoint \"tcp://coord\" must name a port",
      file + ":11:1: heartbeat_interval_ms must be between 50 and 60000 (got 0)",
      file + ":12:1: unknown key \"kill_grace\" in [knobs]; did you mean \"kill_grace_ms\"?",
      file + ":3:1: secret_key_file: secret key " + dir.file("missing.key"),
      file + ":9:1: driver.library: driver library " + dir.file("no-such-driver.so"),
  };
  for (const std::string& command : {" --config " + file + " check-config", " check-config --config " + file}) {
    check_every_problem(bin("kiln-agent") + command, file, expected);
  }
}

TEST_CASE("both daemons take --config before or after the subcommand, and a usage error exits 2") {
  for (const char* daemon : {"kiln-coordinator", "kiln-agent"}) {
    CAPTURE(daemon);
    const Ran unknown = run(bin(daemon) + " --no-such-option");
    CHECK(unknown.status == 2);
    CHECK(contains(unknown.output, "--no-such-option"));
    const Ran before = run(bin(daemon) + " --config /nonexistent/kiln.toml check-config");
    const Ran after = run(bin(daemon) + " check-config --config /nonexistent/kiln.toml");
    CHECK(before.status == 2);
    CHECK(after.status == 2);
    CHECK(contains(before.output, "/nonexistent/kiln.toml"));
    CHECK(before.output == after.output);
    CHECK(run(bin(daemon) + " --help").status == 0);
  }
}

TEST_CASE("kiln-coordinator check-store reports a foreign or damaged database and leaves it alone") {
  TempDir dir("kiln-config-store");
  const std::string empty = dir.write("empty.db", "");
  const Ran refused = run(bin("kiln-coordinator") + " check-store --database " + empty);
  CHECK(refused.status == 1);
  CHECK(contains(refused.output, empty + " is an empty file (0 bytes)"));
  CHECK(std::filesystem::file_size(empty) == 0);

  const Ran missing = run(bin("kiln-coordinator") + " check-store --database " + dir.file("none.db"));
  CHECK(missing.status == 2);
  CHECK(contains(missing.output, "does not exist"));
  CHECK_FALSE(std::filesystem::exists(dir.file("none.db")));
}

TEST_CASE("kiln-coordinator check-config: [store] chooses SQLite or PostgreSQL, and every problem of it is named") {
  TempDir dir("kiln-config-postgres");
  make_keys(dir, "coordinator");
  const std::string file = dir.file("coordinator.toml");
  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[store]\n"
                                "backend = \"postgresql\"\nurl = \"host=db.example.com dbname=kiln user=kiln\"\n");
  const Ran chosen = run(bin("kiln-coordinator") + " --config " + file + " check-config");
  CHECK(chosen.status == 0);
  CHECK(contains(chosen.output, "store              PostgreSQL database kiln on db.example.com:5432 as kiln"));

  const std::string exposed = dir.write("password", "hunter2\n");
  REQUIRE(::chmod(exposed.c_str(), 0644) == 0);
  dir.write("coordinator.toml", "[coordinator]\n"
                                "secret_key_file = \"coordinator.key\"\n"
                                "database = \"kiln.db\"\n"                                // 3: SQLite's file
                                "\n[store]\n"
                                "backend = \"postgresql\"\n"
                                "url = \"postgresql://kiln:hunter2@db.example.com/kiln\"\n"  // 7: a password
                                "password_file = \"password\"\n"                          // 8: open to others
                                "pasword_file = \"password\"\n");                         // 9: a typo
  check_every_problem(bin("kiln-coordinator") + " --config " + file + " check-config", file,
                      {file + ":3:1: database is the SQLite store's file, and [store] chooses PostgreSQL",
                       file + ":7:1: url holds a password; put it in password_file",
                       file + ":8:1: password_file " + exposed + " can be read by others (mode 0644); run `chmod 600",
                       file + ":9:1: unknown key 'pasword_file' in [store]; did you mean 'password_file'?"});
  // Nothing of the password reaches the output.
  CHECK_FALSE(contains(run(bin("kiln-coordinator") + " --config " + file + " check-config").output, "hunter2"));

  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[store]\n"
                                "backend = \"postgres\"\n");
  check_every_problem(bin("kiln-coordinator") + " --config " + file + " check-config", file,
                      {file + ":5:1: backend 'postgres' is not one of sqlite, postgresql (did you mean 'postgresql'?)"});
  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[store]\n"
                                "backend = \"postgresql\"\n");
  check_every_problem(bin("kiln-coordinator") + " --config " + file + " check-config", file,
                      {file + ":4:1: backend = \"postgresql\" needs url"});
  dir.write("coordinator.toml", "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n[store]\n"
                                "url = \"host=db\"\n");
  check_every_problem(bin("kiln-coordinator") + " --config " + file + " check-config", file,
                      {file + ":5:1: url is for backend = \"postgresql\""});
}

TEST_CASE("kiln-agent refuses an endpoint port over 65535, names the line of a missing key file and an unusable "
          "job containment") {
  TempDir dir("kiln-config-agent");
  make_keys(dir, "coordinator");
  const std::string file = dir.file("agent.toml");
  const auto agent_toml = [&](const std::string& endpoint) {
    return "node_id = \"n01\"\nwork_dir = \"work\"\nsecret_key_file = \"missing.key\"\n[coordinator]\nendpoint = \"" +
           endpoint + "\"\npublic_key_file = \"coordinator.pub\"\n[driver]\nlibrary = \"" + std::string(KILN_LIB_DIR) +
           "/libkiln_sim_driver.so\"\n";
  };

  dir.write("agent.toml", agent_toml("tcp://127.0.0.1:70000"));
  const Ran wraps = run(bin("kiln-agent") + " --config " + file + " check-config");
  CHECK(wraps.status == 2);
  CHECK(contains(wraps.output, file + ":5:1: endpoint \"tcp://127.0.0.1:70000\" must use a port between 1 and 65535"));

  dir.write("agent.toml", agent_toml("tcp://127.0.0.1:7601"));
  const Ran no_key = run(bin("kiln-agent") + " --config " + file + " check-config");
  CHECK(no_key.status == 2);
  CHECK(contains(no_key.output, file + ":3:1: secret_key_file: secret key " + dir.file("missing.key")));
  CHECK(contains(no_key.output, "job containment: "));

  const Ran start = run(bin("kiln-agent") + " --config " + file);
  CHECK(start.status == 2);
  CHECK(contains(start.output, file + ":3:1: secret_key_file: cannot read secret key file " + dir.file("missing.key")));

  // A containment that cannot be had is a problem check-config names.
  dir.write("agent.toml", "job_containment = \"cgroup\"\ncgroup_root = \"" + dir.file("plain") + "\"\n" +
                              agent_toml("tcp://127.0.0.1:7601"));
  const Ran no_cgroup = run(bin("kiln-agent") + " --config " + file + " check-config");
  CHECK(no_cgroup.status == 2);
  CHECK(contains(no_cgroup.output, file + ": job_containment = \"cgroup\" but cgroup v2 cannot be used: "));
}

TEST_CASE("kiln: configuration errors exit 2 naming the line, and the command line beats the environment") {
  TempDir dir("kiln-config-client");
  make_keys(dir, "coordinator");
  make_keys(dir, "ci");
  const std::string file = dir.file("client.toml");
  const auto client_toml = [&](const std::string& endpoint, const std::string& secret_key_file) {
    // Line 1: coordinator, 2: coordinator_public_key_file, 3: secret_key_file.
    dir.write("client.toml", "coordinator = \"" + endpoint + "\"\ncoordinator_public_key_file = \"coordinator.pub\"\n"
                             "secret_key_file = \"" + secret_key_file + "\"\ntimeout_ms = 500\n");
  };
  const std::string kiln = bin("kiln") + " --config " + file;

  client_toml("tcp://127.0.0.1:7602", "missing.key");
  const Ran no_key = run(kiln + " nodes");
  CHECK(no_key.status == 2);
  CHECK(contains(no_key.output, file + ":3:1: secret_key_file: cannot read secret key file " + dir.file("missing.key")));

  client_toml("tcp://127.0.0.1:70000", "ci.key");
  const Ran wraps = run(kiln + " nodes");
  CHECK(wraps.status == 2);
  CHECK(contains(wraps.output, file + ":1:1: coordinator \"tcp://127.0.0.1:70000\" must use a port between 1 and "
                                      "65535"));

  // Nothing listens on this port: the commands below fail before they would need an answer.
  client_toml("tcp://127.0.0.1:9", "ci.key");
  const Ran state = run(kiln + " tickets --state closed");
  CHECK(state.status == 2);
  CHECK(contains(state.output, "--state closed is not a ticket state; give open, acknowledged, fixed or duplicate"));
  const Ran page = run(kiln + " run nightly-1 --html " + dir.file("no-such-dir/page.html"));
  CHECK(page.status == 2);
  CHECK(contains(page.output, "--html " + dir.file("no-such-dir/page.html") + ": cannot write there"));

}

TEST_CASE("kiln-qualifier: every problem of qualifier.toml at once, each naming its line, exit 2") {
  TempDir dir("kiln-config-qualifier");
  const std::string file = dir.file("qualifier.toml");
  // Line 2: the misspelt key, 3: claim_ms; [tickets] lacks dir.
  dir.write("qualifier.toml", "[qualifier]\nmodel_sets = \"models.toml\"\nclaim_ms = 10\n"
                              "coordinator_public_key_file = \"coordinator.pub\"\nsecret_key_file = \"q.key\"\n"
                              "bundle_dir = \"bundles\"\ngolden_dir = \"golden\"\n\n[tickets]\n");
  const Ran checked = run(bin("kiln-qualifier") + " --config " + file + " check-config");
  CHECK(checked.status == 2);
  CHECK(contains(checked.output, file + ":2:1: unknown key 'model_sets' in [qualifier]; did you mean 'model_set'?"));
  CHECK(contains(checked.output, file + ":3:12: claim_ms must be an integer from 1000 to 3600000"));
  CHECK(contains(checked.output, file + ": model_set is required: the qualification set (TOML)"));
  CHECK(contains(checked.output, file + ": dir is required: the ticket directory (one JSON file per ticket)"));
  CHECK(contains(checked.output, "run `kiln-qualifier --config " + file + " check-config` again"));
}

TEST_CASE("kiln-qualifier: [reports] is checked like the other tables") {
  TempDir dir("kiln-config-reports");
  const std::string file = dir.file("qualifier.toml");
  const std::string valid = "[qualifier]\nmodel_set = \"models.toml\"\ncoordinator_public_key_file = \"c.pub\"\n"
                            "secret_key_file = \"q.key\"\nbundle_dir = \"bundles\"\ngolden_dir = \"golden\"\n\n"
                            "[tickets]\ndir = \"tickets\"\n\n";
  // Line 12: a misspelt key; directory itself missing.
  dir.write("qualifier.toml", valid + "[reports]\ndirectry = \"pages\"\n");
  const Ran misspelt = run(bin("kiln-qualifier") + " --config " + file + " check-config");
  CHECK(misspelt.status == 2);
  CHECK(contains(misspelt.output, file + ":12:1: unknown key 'directry' in [reports]; did you mean 'directory'?"));
  CHECK(contains(misspelt.output, file + ": [reports] directory is required: where each run's pages are written (or "
                                         "leave out [reports])"));
  dir.write("qualifier.toml", valid + "[reports]\ndirectory = 5\n");
  CHECK(contains(run(bin("kiln-qualifier") + " --config " + file + " check-config").output,
                 file + ":12:13: directory must be a string"));
  dir.write("qualifier.toml", "reports = \"pages\"\n" + valid);
  CHECK(contains(run(bin("kiln-qualifier") + " --config " + file + " check-config").output,
                 file + ":1:11: reports must be a table: [reports] with directory = \"...\""));
}
