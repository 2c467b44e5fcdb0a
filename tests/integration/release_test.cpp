// kiln release against a real coordinator and real git repositories in a temporary directory:
// a bare remote, clones for two people, a Gitea stand-in on loopback; git itself reads back what
// kiln wrote. Promote, approve, merge, roll back, the refusals, two promotions racing for one
// environment, and a merge made without kiln (as after a crash between commit and record).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "coordinator/qualification/change.h"
#include "coordinator/qualification/shell/records_client.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/git_repo.h"
#include "tests/integration/run_command.h"
#include "tests/support/loopback_http.h"

namespace kiln::testing {
namespace {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
namespace fs = std::filesystem;
using nlohmann::json;

bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("expected '" << part << "' in:\n" << text);
  return false;
}

std::string bundle_file(const q::Bundle& bundle, const std::string& extra = "") {
  std::string text = "id = \"" + bundle.id + "\"\nhardware_revisions = [\"a\", \"b\"]\nmodel_configs_version = \"" +
                     bundle.model_configs_version + "\"\n" + extra;
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    text += std::string("[layers.") + layer + "]\nversion = \"" + *bundle.versions.find(*q::layer_from_string(layer)) +
            "\"\ndigest = \"sha256:" + std::string(64, 'e') + "\"\n";
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

TEST_CASE("releases in git: promote, review, merge, race, roll back, and record") {
  Fleet fleet("release");
  fleet.add_key("alice", "ops");
  fleet.add_key("bob", "admin");
  fleet.add_key("dana", "developer");
  fleet.add_key("ci", "ci");
  fleet.start_coordinator();
  auto ci = fleet.client("ci");

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
  const fs::path remote = fleet.dir() / "environments.git";
  const fs::path seed = fleet.dir() / "seed";
  git_out(fleet.dir(), {"init", "-q", "--bare", "-b", "main", remote.string()});
  git_out(fleet.dir(), {"clone", "-q", remote.string(), seed.string()});
  write(seed / ("bundles/" + a + ".toml"), bundle_file(bundles[0]));
  write(seed / ("bundles/" + b + ".toml"), bundle_file(bundles[1]));
  write(seed / ("bundles/" + c + ".toml"), bundle_file(bundles[2], "one_way_firmware = \"raises the minimum firmware to r1-c3\"\n"));
  write(seed / "environments/dev.toml", "bundle = \"\"\nrequires = [\"nightly\"]\nnodes = [\"n01\"]\n");
  write(seed / "environments/staging.toml", "bundle = \"\"\nfollows = \"dev\"\nrequires = [\"nightly\"]\nnodes = [\"n02\"]\n");
  write(seed / "environments/production.toml",
        "bundle = \"\"\nfollows = \"staging\"\nrequires = [\"release\"]\nsoak_hours = 0.002\nnode_labels = "
        "[\"pool=prod\"]\neval_threshold = 0.99\n");
  write(seed / "compatibility.toml",
        "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\nruntime = [\"*\"]\n"
        "[[combination]]\nhardware_revision = \"b\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\nruntime = [\"*\"]\n");
  git_out(seed, {"add", "-A"});
  git_out(seed, {"commit", "-q", "-m", "Environments: dev, staging, production"});
  git_out(seed, {"push", "-q", "origin", "main"});

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

  // Staging, then production: soak time, the release gate and the eval threshold.
  REQUIRE(release("alice", {"promote", b12, "--to", "staging"}, &out) == 0);
  REQUIRE(release("bob", {"approve", "staging"}, &out) == 0);
  REQUIRE(release("bob", {"merge", "staging"}, &out) == 0);
  CHECK(release("alice", {"promote", b12, "--to", "production"}, &out) == 1);
  CHECK(has(out, "to soak 0.0 h in staging first"));
  std::this_thread::sleep_for(std::chrono::milliseconds(7500));
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

  // One-way firmware: promoted again on the new main with its override; no rollback past it.
  git_out(remote, {"branch", "-D", "promote/dev/" + c12});
  for (const char* who : {"alice", "bob"}) {
    git(fleet.dir() / (std::string(who) + "-clone"), {"branch", "-D", "promote/dev/" + c12});
  }
  REQUIRE(release("alice", {"promote", c12, "--to", "dev", "--override-one-way", "fleet moves to r1-c3 (REL-7)"},
                  &out) == 0);
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
