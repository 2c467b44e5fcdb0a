// kiln release against a real coordinator and real git repositories in a temporary directory:
// a bare remote, clones for two people, a Gitea stand-in on loopback; git itself reads back what
// kiln wrote. Promote, approve, merge, roll back, the refusals, two promotions racing for one
// environment, and a merge made without kiln (as after a crash between commit and record).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "records/change.h"
#include "client/records_client.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/git_repo.h"
#include "tests/integration/run_command.h"
#include "tests/support/loopback_http.h"

namespace kiln::testing {
namespace {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("expected '" << part << "' in:\n" << text);
  return false;
}

// The packages nodes install, by layer: the driver's and the firmware's, uploaded to the
// coordinator so a rollout can fetch them by digest; other layers are not installed on nodes.
using Packages = std::map<std::string, std::string>;  // layer -> sha256

std::string bundle_file(const q::Bundle& bundle, const Packages& packages, const std::string& extra = "") {
  std::string text = "id = \"" + bundle.id + "\"\nhardware_revisions = [\"a\", \"b\"]\nmodel_configs_version = \"" +
                     bundle.model_configs_version + "\"\n" + extra;
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    const auto package = packages.find(layer);
    text += std::string("[layers.") + layer + "]\nversion = \"" + *bundle.versions.find(*q::layer_from_string(layer)) +
            "\"\ndigest = \"sha256:" + (package == packages.end() ? std::string(64, 'e') : package->second) + "\"\n";
  }
  return text + "[[model]]\nname = \"llm-70b\"\nbatch_size = 8\nprecision = \"bf16\"\ntensor_parallel = 8\n";
}

json report(const std::string& run_id, const std::string& tier, const std::string& bundle, bool passed,
            TimeMs finished_at_ms, double eval_score = 1.0) {
  json models = json::array();
  for (const char* revision : {"a", "b"}) {
    models.push_back({{"model", "llm-70b"}, {"revision", revision}, {"owner_team", "llm"},
                      {"verdict", passed ? "passed" : "correctness_regression"}, {"fails_run", !passed},
                      {"detail", ""}, {"eval", {{"score", eval_score}, {"reference", 1.0}}}});
  }
  json document = {{"schema", "kiln.qualification-run/1"}, {"run_id", run_id}, {"tier", tier},
                   {"candidate_bundle_id", bundle}, {"baseline_bundle_ids", json::object()}, {"finished", true},
                   {"passed", passed}, {"started_at_ms", finished_at_ms - 1000}, {"finished_at_ms", finished_at_ms},
                   {"jobs_started", 2}, {"models", models}, {"tickets", json::array()}};
  // A release's soak rounds, all run (its gate needs them).
  if (tier == "release") document["soak"] = {{"rounds_asked", 2}, {"rounds_run", 2}};
  return document;
}

std::vector<std::string> promotion_keys(cli::Client& client) {
  auto list = cli::expect_reply<protocol::RecordList>(
      client.request(protocol::ListRecords{protocol::RecordKind::promotion, 1000, 0}));
  REQUIRE(list.has_value());
  std::vector<std::string> keys;
  for (const auto& record : list->records) keys.push_back(record.key);
  return keys;
}

// A package file for a layer, uploaded to the coordinator's artifact store; its sha256.
std::string upload_package(Fleet& fleet, const std::string& key, const std::string& name, const std::string& content) {
  const fs::path file = fleet.dir() / "packages" / name;
  write(file, content);
  std::string out;
  REQUIRE_MESSAGE(fleet.kiln(key, {"artifact", "upload", file.string()}, &out) == 0, out);
  auto digest = sha256_of_file(file.string(), 1 << 20);
  REQUIRE(digest.has_value());
  return *digest;
}

// The environments repository's remote, bare and empty, which the coordinator watches for its
// rollouts (docs/releases.md). Call before start_coordinator.
fs::path watched_remote(Fleet& fleet) {
  const fs::path remote = fleet.dir() / "environments.git";
  git_out(fleet.dir(), {"init", "-q", "--bare", "-b", "main", remote.string()});
  fleet.add_coordinator_tables("[environments]\nrepo = \"environments.git\"\npoll_interval_ms = 200\n");
  return remote;
}

// Seeds the remote's main in one commit: `files` (path -> text) and a compatibility matrix that
// allows any stack on revisions a and b.
void seed_remote(Fleet& fleet, const fs::path& remote, const std::map<std::string, std::string>& files) {
  const fs::path seed = fleet.dir() / "seed";
  git_out(fleet.dir(), {"clone", "-q", remote.string(), seed.string()});
  for (const auto& [path, text] : files) write(seed / path, text);
  write(seed / "compatibility.toml",
        "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\nruntime = [\"*\"]\n"
        "[[combination]]\nhardware_revision = \"b\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\nruntime = [\"*\"]\n");
  git_out(seed, {"add", "-A"});
  git_out(seed, {"commit", "-q", "-m", "Environments"});
  git_out(seed, {"push", "-q", "origin", "main"});
}

// What `kiln envs --json` says of one environment.
json rollout_of(Fleet& fleet, const std::string& key, const std::string& environment) {
  std::string out, err;
  fleet.kiln_split(key, {"--json", "envs"}, &out, &err);
  const auto doc = json::parse(out, nullptr, false);
  REQUIRE_MESSAGE(doc.is_object(), out << err);
  for (const auto& env : doc["environments"]) {
    if (env["name"] == environment) return env;
  }
  return json::object();
}

bool converged_on(Fleet& fleet, const std::string& key, const std::string& environment, const std::string& bundle) {
  const json env = rollout_of(fleet, key, environment);
  return env.value("bundle_id", "") == bundle && env.value("rollout", "") == "converged";
}

// Sim nodes whose chips run firmware `version` and whose driver reports `version` (a driver
// installer's record, read again when the agent restarts): an environment whose bundle pins both
// converges on them without installing anything. `ops`: a key of role ops. Call after
// start_coordinator, with the agents added before it.
void run_nodes_on(Fleet& fleet, cli::Client& ops, const std::vector<std::string>& node_ids, const std::string& version) {
  const auto all_up = [&] {
    return std::all_of(node_ids.begin(), node_ids.end(),
                       [&](const std::string& id) { return node_state_is(ops, id, protocol::NodeState::up); });
  };
  for (const auto& id : node_ids) fleet.start_agent(id);
  REQUIRE(Fleet::eventually(all_up, 20s));
  for (const auto& id : node_ids) {
    REQUIRE(fleet.sim_chip(id, {"set-driver-version", version}) == 0);
    fleet.stop_agent(id, SIGTERM);
  }
  REQUIRE(Fleet::eventually([&] {
    return std::none_of(node_ids.begin(), node_ids.end(),
                        [&](const std::string& id) { return node_state_is(ops, id, protocol::NodeState::up); });
  }, 20s));
  for (const auto& id : node_ids) fleet.start_agent(id);
  REQUIRE(Fleet::eventually([&] {
    return all_up() && std::all_of(node_ids.begin(), node_ids.end(), [&](const std::string& id) {
             auto n = node(ops, id);
             return n && n->driver_version == version;
           });
  }, 20s));
}

TEST_CASE("releases in git: promote, review, merge, race, roll back, and record") {
  Fleet fleet("release");
  fleet.add_key("alice", "ops");
  fleet.add_key("bob", "admin");
  fleet.add_key("dana", "developer");
  fleet.add_key("ci", "ci");
  // The coordinator rolls out what the remote's main says: dev runs on n01, staging on n02, both
  // on the driver and firmware of bundles a and b (the layers' base versions).
  const fs::path remote = watched_remote(fleet);
  for (const char* id : {"n01", "n02"}) fleet.add_agent({id, "a", {}}, "self_test_time_scale=0.05;firmware_version=base");
  fleet.start_coordinator();
  auto ci = fleet.client("ci");
  run_nodes_on(fleet, *ci, {"n01", "n02"}, "base");
  const Packages base_packages = {{"driver", upload_package(fleet, "alice", "driver-base.run", "#!/bin/sh\nexit 0\n")},
                                  {"firmware", upload_package(fleet, "alice", "firmware-base.bin", "firmware base")}};

  // Three bundles of one history; the third flashes one-way firmware.
  std::vector<q::Change> history = {
      {"c1", q::Layer::kernels, "kernels-team", {"gemm-bf16"}, 1000, "", std::nullopt},
      {"c2", q::Layer::compiler, "compiler-team", {"gemm-bf16"}, 2000, "", std::nullopt},
      {"c3", q::Layer::firmware, "fw-team", {}, 3000, "", std::nullopt}};
  std::vector<q::Bundle> bundles;
  for (std::size_t i = 0; i < history.size(); ++i) {
    REQUIRE(qs::record_change(*ci, history[i]));
    bundles.push_back(*q::build_bundle_at(history, i));
    REQUIRE(qs::record_bundle(*ci, bundles.back()));
  }
  const std::string a = bundles[0].id, b = bundles[1].id, c = bundles[2].id;
  const auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  for (const auto& bundle : {a, b, c}) {
    REQUIRE(qs::record_run(*ci, "nightly-" + bundle.substr(0, 6), report("nightly-" + bundle.substr(0, 6), "nightly",
                                                                         bundle, true, now_ms())));
  }

  // The repository: a bare remote, seeded with the layout of docs/releases.md.
  seed_remote(fleet, remote,
              {{"bundles/" + a + ".toml", bundle_file(bundles[0], base_packages)},
               {"bundles/" + b + ".toml", bundle_file(bundles[1], base_packages)},
               {"bundles/" + c + ".toml",
                bundle_file(bundles[2], {}, "one_way_firmware = \"raises the minimum firmware to r1-c3\"\n")},
               {"environments/dev.toml", "bundle = \"\"\nrequires = [\"nightly\"]\nnodes = [\"n01\"]\n"},
               {"environments/staging.toml",
                "bundle = \"\"\nfollows = \"dev\"\nrequires = [\"nightly\"]\nnodes = [\"n02\"]\n"},
               {"environments/production.toml",
                "bundle = \"\"\nfollows = \"staging\"\nrequires = [\"release\"]\nsoak_hours = 0.005\nnode_labels = "
                "[\"pool=prod\"]\neval_threshold = 0.99\n"}});

  // Each person's clone and release.toml; alice's opens pull requests on a Gitea stand-in.
  LoopbackServer gitea({201});
  write(fleet.dir() / "forge.token", "secret-token\n");
  auto clone_for = [&](const std::string& who, bool forge) {
    const fs::path clone = fleet.dir() / (who + "-clone");
    git_out(fleet.dir(), {"clone", "-q", remote.string(), clone.string()});
    std::string settings = "[release]\nrepo = \"" + clone.string() + "\"\nremote = \"origin\"\n";
    if (forge) {
      settings += "[release.forge]\nkind = \"gitea\"\napi_url = \"" + gitea.url("/api/v1") +
                  "\"\nproject = \"ops/environments\"\ntoken_file = \"forge.token\"\n";
    }
    write(fleet.dir() / (who + "-release.toml"), settings);
    return clone;
  };
  clone_for("alice", true);
  const fs::path bob_clone = clone_for("bob", false);
  clone_for("dana", false);
  auto release = [&](const std::string& who, std::vector<std::string> args, std::string* output) {
    args.insert(args.begin(), "release");
    args.insert(args.begin() + 2, {"--release-config", (fleet.dir() / (who + "-release.toml")).string()});
    return fleet.kiln(who, args, output);
  };
  const std::string a12 = a.substr(0, 12), b12 = b.substr(0, 12), c12 = c.substr(0, 12);
  std::string out;

  // Refused: staging before dev.
  CHECK(release("alice", {"promote", a12, "--to", "staging"}, &out) == 1);
  CHECK(has(out, "is not running in dev (dev runs nothing)"));

  // Proposed: a branch, one commit, trailers and the evidence file, pushed, with a pull request.
  REQUIRE(release("alice", {"promote", a12, "--to", "dev"}, &out) == 0);
  CHECK(has(out, "proposed " + a12 + " for dev on branch promote/dev/" + a12));
  const std::string branch_a = "promote/dev/" + a12;
  const std::string message = git_out(remote, {"log", "-1", "--format=%B", branch_a});
  CHECK(has(message, "Kiln-Gate: nightly nightly-" + a.substr(0, 6) + " passed"));
  CHECK(has(message, "Kiln-Promoted-By: alice (ops)"));
  CHECK(has(git_out(remote, {"show", branch_a + ":environments/dev.toml"}), "bundle = \"" + a + "\""));
  auto evidence = json::parse(git_out(remote, {"show", branch_a + ":evidence/dev/" + a + ".json"}));
  CHECK(evidence["models"].size() == 2);
  CHECK(evidence["models"][0]["correctness"] == "passed");
  REQUIRE(gitea.requests().size() == 1);
  CHECK(has(gitea.requests()[0].head, "POST /api/v1/repos/ops/environments/pulls"));
  CHECK(has(gitea.requests()[0].head, "Authorization: token secret-token"));
  CHECK(json::parse(gitea.requests()[0].body)["head"] == branch_a);

  // Review: not by its author, not by a developer; merge only once approved.
  CHECK(release("alice", {"merge", "dev"}, &out) == 1);
  CHECK(has(out, "is not approved"));
  CHECK(release("alice", {"approve", "dev"}, &out) == 3);
  CHECK(has(out, "alice made the promotion"));
  CHECK(release("dana", {"approve", "dev"}, &out) == 3);
  CHECK(has(out, "role developer may not approve"));
  REQUIRE(release("bob", {"approve", "dev"}, &out) == 0);
  REQUIRE(release("bob", {"merge", "dev"}, &out) == 0);
  CHECK(has(git_out(remote, {"show", "main:environments/dev.toml"}), "bundle = \"" + a + "\""));
  const std::string merge_message = git_out(remote, {"log", "-1", "--format=%B", "main"});
  CHECK(has(merge_message, "Kiln-Approved-By: bob (admin)"));
  CHECK(has(merge_message, "Kiln-Merged-By: bob (admin)"));
  CHECK(git_out(remote, {"rev-list", "--parents", "-n", "1", "main"}).size() > 2 * 41);  // a merge commit
  const std::string dev_merge = git_out(remote, {"rev-parse", "main"}).substr(0, 40);
  auto keys = promotion_keys(*ci);
  CHECK(std::find(keys.begin(), keys.end(), "dev@" + dev_merge) != keys.end());

  // Two promotions race for dev: the first merged wins, the other is told to rebase.
  REQUIRE(release("alice", {"promote", b12, "--to", "dev"}, &out) == 0);
  CHECK(release("alice", {"promote", c12, "--to", "dev"}, &out) == 1);
  CHECK(has(out, "one-way firmware (raises the minimum firmware to r1-c3)"));
  REQUIRE(release("alice", {"promote", c12, "--to", "dev", "--override-one-way", "fleet moves to r1-c3 (REL-7)"},
                  &out) == 0);
  CHECK(has(git_out(remote, {"log", "-1", "--format=%B", "promote/dev/" + c12}),
            "Kiln-One-Way-Override: fleet moves to r1-c3 (REL-7)"));
  CHECK(release("bob", {"approve", "dev"}, &out) == 1);
  CHECK(has(out, "2 promotions to dev are open"));
  REQUIRE(release("bob", {"approve", "promote/dev/" + b12}, &out) == 0);
  REQUIRE(release("bob", {"approve", "promote/dev/" + c12}, &out) == 0);
  REQUIRE(release("bob", {"merge", "promote/dev/" + b12}, &out) == 0);
  CHECK(release("bob", {"merge", "promote/dev/" + c12}, &out) == 1);
  CHECK(has(out, "rebase"));
  CHECK(has(git_out(remote, {"show", "main:environments/dev.toml"}), "bundle = \"" + b + "\""));

  // Staging, then production: the previous environment converged on the bundle, soak time, the
  // release gate and the eval threshold.
  REQUIRE_MESSAGE(Fleet::eventually([&] { return converged_on(fleet, "alice", "dev", b); }, 30s),
                  rollout_of(fleet, "alice", "dev").dump(2));
  REQUIRE(release("alice", {"promote", b12, "--to", "staging"}, &out) == 0);
  REQUIRE(release("bob", {"approve", "staging"}, &out) == 0);
  REQUIRE(release("bob", {"merge", "staging"}, &out) == 0);
  const auto staging_merged = std::chrono::steady_clock::now();
  CHECK(release("alice", {"promote", b12, "--to", "production"}, &out) == 1);
  CHECK(has(out, "to soak 0.0 h in staging first"));
  REQUIRE_MESSAGE(Fleet::eventually([&] { return converged_on(fleet, "alice", "staging", b); }, 30s),
                  rollout_of(fleet, "alice", "staging").dump(2));
  std::this_thread::sleep_until(staging_merged + std::chrono::seconds(19));  // the soak: 18 s
  CHECK(release("alice", {"promote", b12, "--to", "production"}, &out) == 1);
  CHECK(has(out, "production requires a passing release run of bundle " + b12 + ", and none is recorded"));
  // A release run without its soak rounds is no release evidence, passed or not.
  json unsoaked = report("release-unsoaked", "release", b, true, now_ms());
  unsoaked["soak"]["rounds_run"] = 0;
  REQUIRE(qs::record_run(*ci, "release-unsoaked", unsoaked));
  CHECK(release("alice", {"promote", b12, "--to", "production"}, &out) == 1);
  CHECK(has(out, "production requires a release run of bundle " + b12 + " with its soak evidence: release-unsoaked "
                 "passed, but it ran 0 of its 2 soak rounds"));
  REQUIRE(qs::record_run(*ci, "release-low", report("release-low", "release", b, true, now_ms(), 0.985)));
  CHECK(release("alice", {"promote", b12, "--to", "production"}, &out) == 1);
  CHECK(has(out, "llm-70b's eval would fall below production's accepted threshold: 0.9850"));
  REQUIRE(qs::record_run(*ci, "release-good", report("release-good", "release", b, true, now_ms() + 1000, 0.997)));
  REQUIRE(release("alice", {"promote", b12, "--to", "production"}, &out) == 0);
  REQUIRE(release("bob", {"approve", "production"}, &out) == 0);
  // Staging's node is lost before the merge: production waits until staging is healthy again.
  fleet.stop_agent("n02", SIGKILL);
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ci, "n02", protocol::NodeState::lost); }, 60s));
  CHECK(release("bob", {"merge", "production"}, &out) == 1);
  CHECK(has(out, "bundle " + b12 + " may not go to production yet: its rollout in staging is converged; n02 lost"));
  fleet.start_agent("n02");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ci, "n02", protocol::NodeState::up); }, 30s));
  REQUIRE(release("bob", {"merge", "production"}, &out) == 0);
  const std::string production_merge = git_out(remote, {"rev-parse", "main"}).substr(0, 40);

  // Rollback: a new commit reverting the promotion; history keeps both.
  CHECK(release("alice", {"rollback", "staging"}, &out) == 0);  // ops may roll back too
  REQUIRE(release("bob", {"rollback", "production"}, &out) == 0);
  CHECK(has(git_out(remote, {"show", "main:environments/production.toml"}), "bundle = \"\""));
  const std::string rollback_message = git_out(remote, {"log", "-1", "--format=%B", "main"});
  CHECK(has(rollback_message, "Kiln-Reverts: " + production_merge));
  CHECK(has(git_out(remote, {"log", "--format=%s", "main"}), "Promote " + b12 + " to production"));
  CHECK(release("bob", {"rollback", "production"}, &out) == 5);
  CHECK(has(out, "production has no promotion left to roll back"));

  // One-way firmware: promoted again on the new main with its override, which replaces the
  // proposal main left behind (no branch deleted by hand); no rollback past it.
  const std::string raced = git_out(remote, {"rev-parse", "promote/dev/" + c12}).substr(0, 40);
  REQUIRE(release("alice", {"promote", c12, "--to", "dev", "--override-one-way", "fleet moves to r1-c3 (REL-7)"},
                  &out) == 0);
  CHECK(has(out, "replaces the branch's earlier proposal (commit " + raced.substr(0, 12) + ")"));
  CHECK(git_out(remote, {"rev-parse", "promote/dev/" + c12}).substr(0, 40) != raced);
  REQUIRE(release("bob", {"approve", "dev"}, &out) == 0);
  REQUIRE(release("bob", {"merge", "dev"}, &out) == 0);
  CHECK(release("bob", {"rollback", "dev"}, &out) == 1);
  CHECK(has(out, "dev cannot be rolled back past bundle " + c12 + ": its firmware is one-way"));

  // A merge made without kiln (a forge, any git client, or kiln killed between its commit and
  // its record): the next kiln release command records it.
  REQUIRE(release("alice", {"promote", a12, "--to", "staging"}, &out) == 1);  // staging needs a in dev: it runs c
  git_out(bob_clone, {"pull", "-q", "--ff-only"});
  write(bob_clone / "environments/dev.toml", "bundle = \"" + a + "\"\nrequires = [\"nightly\"]\nnodes = [\"n01\"]\n");
  write(bob_clone / "environments/staging.toml",
        "bundle = \"" + a + "\"\nfollows = \"dev\"\nrequires = [\"nightly\"]\nnodes = [\"n02\"]\n");
  git_out(bob_clone, {"commit", "-q", "-am", "Dev and staging back on a, by hand"});
  git_out(bob_clone, {"push", "-q", "origin", "main"});
  const std::string by_hand = git_out(remote, {"rev-parse", "main"}).substr(0, 40);
  keys = promotion_keys(*ci);
  CHECK(std::find(keys.begin(), keys.end(), "staging@" + by_hand) == keys.end());
  REQUIRE(release("dana", {"status"}, &out) == 0);  // a developer may read, not record
  CHECK(out.find("recorded") == std::string::npos);
  REQUIRE(release("alice", {"status"}, &out) == 0);
  CHECK(has(out, "recorded 2 environment changes the coordinator lacked"));  // dev and staging
  keys = promotion_keys(*ci);
  CHECK(std::find(keys.begin(), keys.end(), "staging@" + by_hand) != keys.end());
  CHECK(std::find(keys.begin(), keys.end(), "dev@" + by_hand) != keys.end());
  REQUIRE(release("alice", {"status"}, &out) == 0);
  CHECK(out.find("recorded") == std::string::npos);

  // Every step is in the coordinator's audit log, with the key and role that took it.
  REQUIRE(fleet.kiln("alice", {"audit", "--since", "1h", "--json"}, &out) == 0);
  const json audit = json::parse(out);
  const auto lines_of = [&](const std::string& action) {
    std::vector<json> found;
    for (const auto& line : audit) {
      if (line["action"] == action) found.push_back(line);
    }
    return found;
  };
  const auto proposed = lines_of("promotion_proposed");
  REQUIRE(proposed.size() == 6);
  CHECK(proposed[0]["actor"] == "alice");
  CHECK(proposed[0]["role"] == "ops");
  CHECK(proposed[0]["subject"] == "environment dev");
  CHECK(has(proposed[0]["detail"].get<std::string>(), a12 + " on branch " + branch_a));
  const auto approved = lines_of("promotion_approved");
  REQUIRE(approved.size() == 6);
  CHECK(approved[0]["actor"] == "bob");
  CHECK(approved[0]["role"] == "admin");
  const auto merged = lines_of("promotion_merged");
  REQUIRE(merged.size() == 5);  // dev a, dev b, staging b, production b, dev c
  CHECK(has(merged[0]["detail"].get<std::string>(), "none -> " + a12 + " in commit " + dev_merge.substr(0, 12)));
  CHECK(has(merged[0]["detail"].get<std::string>(), "approved by bob (admin)"));
  const auto overrides = lines_of("one_way_override");
  REQUIRE(overrides.size() == 2);
  CHECK(has(overrides[0]["detail"].get<std::string>(), "promoted anyway: fleet moves to r1-c3 (REL-7)"));
  const auto rollbacks = lines_of("rollback");
  REQUIRE(rollbacks.size() == 2);
  CHECK(rollbacks[0]["actor"] == "alice");
  CHECK(rollbacks[0]["subject"] == "environment staging");
  CHECK(rollbacks[1]["actor"] == "bob");
  const auto by_hand_lines = lines_of("environment_changed");
  REQUIRE(by_hand_lines.size() >= 2);  // the seed commit's and the hand edit's, recorded by alice
  CHECK(by_hand_lines.back()["actor"] == "alice");
  for (std::size_t i = 1; i < audit.size(); ++i) CHECK(audit[i]["seq"] > audit[i - 1]["seq"]);
  REQUIRE(fleet.kiln("bob", {"audit"}, &out) == 0);
  CHECK(has(out, "TIME"));
  CHECK(has(out, "promotion_merged"));
  CHECK(fleet.kiln("dana", {"audit"}, &out) == 3);
  CHECK(has(out, "role developer may not read the audit log; ops and admin keys do"));
  CHECK(fleet.kiln("alice", {"audit", "--since", "7x"}, &out) == 2);
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

TEST_CASE("releases follow health: a bundle whose dev rollout halted goes no further; the reason shows; it may be "
          "promoted again after a rollback") {
  Fleet fleet("release-health");
  fleet.add_key("alice", "ops");
  fleet.add_key("bob", "admin");
  fleet.add_key("ci", "ci");
  const fs::path remote = watched_remote(fleet);
  for (const char* id : {"n01", "n02", "n03"}) {
    fleet.add_agent({id, "a", {}}, "self_test_time_scale=0.05;firmware_version=base");
  }
  fleet.start_coordinator();
  auto ci = fleet.client("ci");
  for (const char* id : {"n01", "n02", "n03"}) fleet.start_agent(id);
  REQUIRE(Fleet::eventually([&] {
    for (const char* id : {"n01", "n02", "n03"}) {
      if (!node_state_is(*ci, id, protocol::NodeState::up)) return false;
    }
    return true;
  }, 20s));

  // A bundle whose new driver's installer is no program the nodes can run (built for another
  // machine): executing it fails with "Exec format error".
  std::vector<q::Change> history = {{"c1", q::Layer::driver, "driver-team", {}, 1000, "", std::nullopt}};
  REQUIRE(qs::record_change(*ci, history[0]));
  const q::Bundle bundle = *q::build_bundle_at(history, 0);
  REQUIRE(qs::record_bundle(*ci, bundle));
  const std::string x = bundle.id, x12 = x.substr(0, 12);
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  REQUIRE(qs::record_run(*ci, "nightly-x", report("nightly-x", "nightly", x, true, now_ms)));
  const Packages packages = {
      {"driver", upload_package(fleet, "alice", "driver-r1-c1.run", std::string("\x7f" "ELF\x02\x01\x01", 7) + "aarch64")},
      {"firmware", upload_package(fleet, "alice", "firmware-base.bin", "firmware base")}};

  seed_remote(fleet, remote,
              {{"bundles/" + x + ".toml", bundle_file(bundle, packages)},
               {"environments/dev.toml", "bundle = \"\"\nrequires = [\"nightly\"]\nnodes = [\"n01\", \"n02\"]\n"},
               {"environments/staging.toml",
                "bundle = \"\"\nfollows = \"dev\"\nrequires = [\"nightly\"]\nnodes = [\"n03\"]\n"}});
  for (const char* who : {"alice", "bob"}) {
    const fs::path clone = fleet.dir() / (std::string(who) + "-clone");
    git_out(fleet.dir(), {"clone", "-q", remote.string(), clone.string()});
    write(fleet.dir() / (std::string(who) + "-release.toml"),
          "[release]\nrepo = \"" + clone.string() + "\"\nremote = \"origin\"\n");
  }
  auto release = [&](const std::string& who, std::vector<std::string> args, std::string* output) {
    args.insert(args.begin(), "release");
    args.insert(args.begin() + 2, {"--release-config", (fleet.dir() / (who + "-release.toml")).string()});
    return fleet.kiln(who, args, output);
  };
  std::string out;

  // Dev takes the bundle (its gates passed); its canary fails to install the driver and is
  // quarantined, and the rollout halts there.
  REQUIRE(release("alice", {"promote", x12, "--to", "dev"}, &out) == 0);
  REQUIRE(release("bob", {"approve", "dev"}, &out) == 0);
  const std::string first_proposal = git_out(remote, {"rev-parse", "promote/dev/" + x12}).substr(0, 40);
  REQUIRE(release("bob", {"merge", "dev"}, &out) == 0);
  REQUIRE_MESSAGE(Fleet::eventually([&] { return rollout_of(fleet, "alice", "dev").value("rollout", "") == "halted"; },
                                    90s),
                  rollout_of(fleet, "alice", "dev").dump(2));
  const json dev = rollout_of(fleet, "alice", "dev");
  CHECK(dev["bundle_id"] == x);
  REQUIRE(dev["nodes"].size() == 2);
  CHECK(dev["nodes"][0]["node_id"] == "n01");
  CHECK(dev["nodes"][0]["state"] == "failed");
  // `kiln envs` says why, as `kiln result` of the install job does.
  CHECK(has(dev["nodes"][0]["detail"].get<std::string>(), "Exec format error"));
  CHECK(has(dev["nodes"][0]["detail"].get<std::string>(), "the driver installer did not start"));
  CHECK(fleet.kiln("alice", {"envs"}, &out) == 1);
  CHECK(has(out, "Exec format error"));
  const std::string install_job = std::to_string(dev["nodes"][0]["install_job_id"].get<std::uint64_t>());
  CHECK(fleet.kiln("alice", {"result", install_job}, &out) == 1);  // the job failed
  CHECK(has(out, "Exec format error"));
  auto n01 = node(*ci, "n01");
  REQUIRE(n01.has_value());
  CHECK(n01->state == protocol::NodeState::quarantined);

  // Staging does not take it: dev's rollout of it halted, its canary quarantined.
  CHECK(release("alice", {"promote", x12, "--to", "staging"}, &out) == 1);
  CHECK(has(out, "bundle " + x12 + " may not go to staging yet: its rollout in dev is halted"));
  CHECK(has(out, "n01 failed"));
  CHECK(has(out, "Exec format error"));
  CHECK(has(out, "quarantined (did not converge on bundle " + x12));
  CHECK(has(out, "`kiln release rollback dev`"));
  CHECK(git(remote, {"rev-parse", "--verify", "-q", "promote/staging/" + x12}).status != 0);
  const std::string coordinator_log = fleet.log_of("coordinator");
  // The canary stopped dev's rollout, and staging's canary was never touched.
  CHECK(coordinator_log.find("of bundle " + x12 + " on node n02") == std::string::npos);
  CHECK(coordinator_log.find("of bundle " + x12 + " on node n03") == std::string::npos);

  // Dev rolls back. The same bundle may be promoted again later (here at once): its branch, merged
  // and rolled back, is made anew from main, with nothing deleted by hand.
  REQUIRE(release("bob", {"rollback", "dev"}, &out) == 0);
  REQUIRE(release("alice", {"promote", x12, "--to", "dev"}, &out) == 0);
  CHECK(has(out, "proposed " + x12 + " for dev on branch promote/dev/" + x12));
  CHECK(has(out, "replaces the branch's earlier proposal (commit " + first_proposal.substr(0, 12) + ")"));
  const std::string second_proposal = git_out(remote, {"rev-parse", "promote/dev/" + x12}).substr(0, 40);
  CHECK(second_proposal != first_proposal);
  CHECK(git_out(remote, {"rev-parse", "promote/dev/" + x12 + "^"}).substr(0, 40) ==
        git_out(remote, {"rev-parse", "main"}).substr(0, 40));
  CHECK(release("alice", {"promote", x12, "--to", "dev"}, &out) == 1);  // open on main's tip: proposed once
  CHECK(has(out, "is already proposed on promote/dev/" + x12));
  REQUIRE(release("bob", {"approve", "dev"}, &out) == 0);
  REQUIRE(release("bob", {"merge", "dev"}, &out) == 0);
  CHECK(has(git_out(remote, {"show", "main:environments/dev.toml"}), "bundle = \"" + x + "\""));
}

TEST_CASE("kiln release add-bundle writes the recorded bundle's file with each package's digest, once") {
  Fleet fleet("add-bundle");
  fleet.add_key("ci", "ci");
  fleet.add_key("dana", "developer");
  fleet.start_coordinator();
  auto ci = fleet.client("ci");
  std::vector<q::Change> history = {{"c1", q::Layer::firmware, "fw-team", {}, 1000, "", std::nullopt}};
  REQUIRE(qs::record_change(*ci, history[0]));
  const q::Bundle bundle = *q::build_bundle_at(history, 0);
  REQUIRE(qs::record_bundle(*ci, bundle));

  const fs::path repo = fleet.dir() / "environments";
  fs::create_directories(repo);
  git_out(repo, {"init", "-q", "-b", "main"});
  write(repo / "compatibility.toml", "");
  git_out(repo, {"add", "-A"});
  git_out(repo, {"commit", "-q", "-m", "environments"});
  std::vector<std::string> args = {"release", "add-bundle", "--repo", repo.string(), bundle.id.substr(0, 8)};
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    write(fleet.dir() / "packages" / layer, std::string("package of ") + layer);
    args.push_back("--package");
    args.push_back(std::string(layer) + "=" + (fleet.dir() / "packages" / layer).string());
  }
  std::string out;
  CHECK(fleet.kiln("dana", args, &out) == 3);  // developers do not add bundles
  std::vector<std::string> short_of_one(args.begin(), args.end() - 2);
  CHECK(fleet.kiln("ci", short_of_one, &out) == 2);
  CHECK(has(out, "add --package LAYER=FILE for firmware"));

  REQUIRE(fleet.kiln("ci", args, &out) == 0);
  CHECK(has(out, "added bundles/" + bundle.id + ".toml"));
  const std::string file = git_out(repo, {"show", "main:bundles/" + bundle.id + ".toml"});
  CHECK(has(file, "id = '" + bundle.id + "'"));
  auto digest = sha256_of_file((fleet.dir() / "packages" / "firmware").string(), 1 << 20);
  REQUIRE(digest.has_value());
  CHECK(has(file, "digest = 'sha256:" + *digest + "'"));
  CHECK(has(git_out(repo, {"log", "-1", "--format=%B"}), "Kiln-Added-By: ci (ci)"));

  // Again: nothing to do. With another package: refused, a bundle's file never changes.
  REQUIRE(fleet.kiln("ci", args, &out) == 0);
  CHECK(has(out, "on main already"));
  write(fleet.dir() / "packages" / "firmware", "another image");
  CHECK(fleet.kiln("ci", args, &out) == 1);
  CHECK(has(out, "a bundle's file never changes"));
}

}  // namespace
}  // namespace kiln::testing
