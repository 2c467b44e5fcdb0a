#include "release/promotion.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/release/release_samples.h"

namespace kiln::release {
namespace {

using testing::bundle_id;
using testing::repo_files;

constexpr TimeMs kNow = 1'800'000'000'000;

GateRun run_of(const std::string& tier, char bundle, bool passed, TimeMs finished_at_ms = kNow - kHourMs,
               std::optional<double> eval_score = std::nullopt) {
  GateRun run;
  run.run_id = tier + "-" + std::string(1, bundle);
  run.tier = tier;
  run.bundle_id = bundle_id(bundle);
  run.finished = true;
  run.passed = passed;
  run.finished_at_ms = finished_at_ms;
  if (tier == "release") run.soak = SoakRounds{2, 2};  // its soak rounds, all run
  for (const char* revision : {"a", "b"}) {
    ModelResult model;
    model.model = "llm-70b";
    model.revision = revision;
    model.verdict = passed ? "passed" : "correctness_regression";
    model.detail = passed ? "" : "logits off";
    model.eval_score = eval_score;
    model.eval_reference = eval_score ? std::optional<double>(1.0) : std::nullopt;
    run.models.push_back(model);
  }
  return run;
}

RecordedBundle recorded(char bundle, const std::string& firmware = "fw-2.1") {
  RecordedBundle r{bundle_id(bundle), {}, {"a", "b"}};
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    r.versions[layer] = std::string(layer) == "firmware" ? firmware : std::string(layer) + "-1";
  }
  return r;
}

Snapshot snapshot_of(const std::string& dev, const std::string& staging, const std::string& production = "") {
  auto files = repo_files(dev, staging);
  if (!production.empty()) {
    auto& text = files["environments/production.toml"];
    text.replace(text.find("bundle = \"\""), 11, "bundle = \"" + production + "\"");
  }
  auto snapshot = read_snapshot(files);
  REQUIRE(snapshot.has_value());
  return *snapshot;
}

const Actor kAlice{"alice", "ops"};
const Actor kBob{"bob", "admin"};

PromotionRequest request(char bundle, const std::string& environment, std::string override_reason = "") {
  return PromotionRequest{bundle_id(bundle), environment, std::move(override_reason), kAlice, kNow};
}

std::string refusal(const Result<Promotion>& result) {
  REQUIRE_FALSE(result.has_value());
  return result.error().message;
}

TEST_CASE("dev takes a bundle whose nightly passed, with every model's evidence") {
  auto snapshot = snapshot_of("", "");
  auto promotion = decide_promotion(snapshot, request('a', "dev"),
                                    {run_of("nightly", 'a', false, kNow - 2 * kHourMs), run_of("nightly", 'a', true)},
                                    recorded('a'), std::nullopt);
  REQUIRE(promotion.has_value());
  CHECK(promotion->branch == "promote/dev/aaaaaaaaaaaa");
  REQUIRE(promotion->gates.size() == 1);
  CHECK(promotion->gates[0].passed);
  CHECK(promotion->models.size() == 2);
  CHECK(promotion->models[0].correctness == "passed");
  const std::string message = promotion_message(*promotion);
  CHECK(message.starts_with("Promote aaaaaaaaaaaa to dev\n"));
  CHECK(message.find("Kiln-Gate: nightly nightly-a passed\n") != std::string::npos);
  CHECK(message.find("Kiln-Promoted-By: alice (ops)\n") != std::string::npos);
  CHECK(message.find("Kiln-Evidence: evidence/dev/" + bundle_id('a') + ".json\n") != std::string::npos);
  auto evidence = evidence_json(*promotion);
  CHECK(evidence["schema"] == "kiln.promotion-evidence/1");
  CHECK(evidence["models"][1]["revision"] == "b");
}

TEST_CASE("a gate passed by a waiver promotes while the waiver holds, shows it, and blocks again after expiry") {
  auto snapshot = snapshot_of("", "");
  GateRun waived = run_of("nightly", 'a', false);
  waived.passed = true;  // its failure let through by the waiver
  RecordedWaiver waiver;
  waiver.model = "llm-70b";
  waiver.metric = "correctness";
  waiver.text = "waived by mei until 2027-01-15 08:00 UTC: fix in c9";
  waiver.expires_at_ms = kNow + kHourMs;
  waived.waivers.push_back(waiver);
  auto promotion = decide_promotion(snapshot, request('a', "dev"), {waived}, recorded('a'), std::nullopt);
  REQUIRE(promotion.has_value());
  const std::string message = promotion_message(*promotion);
  CHECK(message.find("  - gate llm-70b correctness waived by mei") != std::string::npos);
  CHECK(message.find("Kiln-Waiver: nightly nightly-a llm-70b correctness: waived by mei") != std::string::npos);
  CHECK(evidence_json(*promotion)["gates"][0]["waivers"][0]["text"] == waived.waivers[0].text);

  auto later = request('a', "dev");
  later.now_ms = kNow + kHourMs;
  const std::string expired = refusal(decide_promotion(snapshot, later, {waived}, recorded('a'), std::nullopt));
  CHECK(expired.find("nightly-a passed only by a waiver that has expired (gate llm-70b correctness") !=
        std::string::npos);
}

TEST_CASE("a gate whose waiver lapsed at the coordinator blocks, saying which and why") {
  // The report judged again by the waivers the coordinator holds (waiver.h revoke_lapsed_waivers).
  nlohmann::json report = {{"schema", "kiln.qualification-run/1"}, {"run_id", "nightly-1"}, {"tier", "nightly"},
                           {"candidate_bundle_id", bundle_id('a')}, {"finished", true}, {"passed", false},
                           {"finished_at_ms", kNow - kHourMs},
                           {"models", {{{"model", "llm-70b"}, {"revision", "a"}, {"verdict", "performance_regression"},
                                        {"detail", "4% low"}}}},
                           {"waivers", nlohmann::json::array()},
                           {"lapsed_waivers", {{{"model", "llm-70b"}, {"metric", "throughput"},
                                                {"text", "waived by mei until 2027-01-15 08:00 UTC: fix in c9"},
                                                {"why", "withdrawn by jonas at 2027-01-10 09:00 UTC"},
                                                {"expires_at_ms", kNow + 7 * 24 * kHourMs}}}}};
  auto run = gate_run_from_json(report);
  REQUIRE(run.has_value());
  const std::string message = refusal(decide_promotion(snapshot_of("", ""), request('a', "dev"), {*run}, recorded('a'),
                                                       std::nullopt));
  CHECK(message.find("nightly-1 passed only by a waiver that is no longer in force (gate llm-70b throughput, waived "
                     "by mei until 2027-01-15 08:00 UTC: fix in c9: withdrawn by jonas at 2027-01-10 09:00 UTC)") !=
        std::string::npos);
}

TEST_CASE("a release run is the release gate's evidence only with its soak rounds, all run") {
  auto snapshot = snapshot_of(bundle_id('a'), bundle_id('a'));
  const auto refusal_for = [&](std::optional<SoakRounds> soak) {
    GateRun release = run_of("release", 'a', true, kNow, 0.999);
    release.soak = soak;
    return refusal(decide_promotion(snapshot, request('a', "production"), {run_of("nightly", 'a', true), release},
                                    recorded('a'), kNow - 50 * kHourMs));
  };
  CHECK(refusal_for(std::nullopt).find("production requires a release run of bundle aaaaaaaaaaaa with its soak "
                                       "evidence: release-a passed, but its report records no soak rounds") !=
        std::string::npos);
  CHECK(refusal_for(SoakRounds{0, 0}).find("it asked for no soak round") != std::string::npos);
  CHECK(refusal_for(SoakRounds{2, 1}).find("it ran 1 of its 2 soak rounds") != std::string::npos);
  nlohmann::json report = {{"schema", "kiln.qualification-run/1"}, {"run_id", "release-1"}, {"tier", "release"},
                           {"candidate_bundle_id", bundle_id('a')}, {"finished", true}, {"passed", true},
                           {"models", nlohmann::json::array()}, {"soak", {{"rounds_asked", 2}, {"rounds_run", 2}}}};
  auto run = gate_run_from_json(report);
  REQUIRE(run.has_value());
  REQUIRE(run->soak.has_value());
  CHECK(run->soak->asked == 2);
  CHECK(run->soak->run == 2);
}

TEST_CASE("every refusal says why and what to do") {
  SUBCASE("no gate run, or only a failing one") {
    CHECK(refusal(decide_promotion(snapshot_of("", ""), request('a', "dev"), {}, recorded('a'), std::nullopt))
              .find("requires a passing nightly run of bundle aaaaaaaaaaaa, and none is recorded; run `kiln nightly "
                    "--bundle aaaaaaaaaaaa --wait` first") != std::string::npos);
    CHECK(refusal(decide_promotion(snapshot_of("", ""), request('a', "dev"), {run_of("nightly", 'a', false)},
                                   recorded('a'), std::nullopt))
              .find("nightly-a failed") != std::string::npos);
    // A passing run of another bundle is no evidence for this one.
    CHECK_FALSE(decide_promotion(snapshot_of("", ""), request('a', "dev"), {run_of("nightly", 'b', true)}, recorded('a'),
                                 std::nullopt)
                    .has_value());
  }
  SUBCASE("not on the previous environment") {
    auto message = refusal(decide_promotion(snapshot_of(bundle_id('b'), ""), request('a', "staging"),
                                            {run_of("nightly", 'a', true)}, recorded('a'), std::nullopt));
    CHECK(message.find("is not running in dev (dev runs bbbbbbbbbbbb)") != std::string::npos);
    CHECK(message.find("kiln release promote aaaaaaaaaaaa --to dev") != std::string::npos);
  }
  SUBCASE("production needs staging's gates, its own, and the soak") {
    auto snapshot = snapshot_of(bundle_id('a'), bundle_id('a'));
    auto soon = refusal(decide_promotion(snapshot, request('a', "production"),
                                         {run_of("nightly", 'a', true), run_of("release", 'a', true, kNow, 1.0)},
                                         recorded('a'), kNow - 10 * kHourMs));
    CHECK(soon.find("requires bundle aaaaaaaaaaaa to soak 48.0 h in staging first; it has run there for 10.0 h") !=
          std::string::npos);
    auto no_nightly = refusal(decide_promotion(snapshot, request('a', "production"), {run_of("release", 'a', true, kNow, 1.0)},
                                               recorded('a'), kNow - 50 * kHourMs));
    CHECK(no_nightly.find("production requires a passing nightly run") != std::string::npos);
    CHECK(required_gates(snapshot, "production") == std::vector<std::string>{"nightly", "release"});
    auto ok = decide_promotion(snapshot, request('a', "production"),
                               {run_of("nightly", 'a', true), run_of("release", 'a', true, kNow, 0.999)}, recorded('a'),
                               kNow - 50 * kHourMs);
    REQUIRE(ok.has_value());
    CHECK(*ok->soaked_hours == doctest::Approx(50));
    CHECK(*ok->models.back().eval_threshold == doctest::Approx(0.995));
  }
  SUBCASE("a production model's eval below its accepted threshold") {
    auto snapshot = snapshot_of(bundle_id('a'), bundle_id('a'));
    auto message = refusal(decide_promotion(snapshot, request('a', "production"),
                                            {run_of("nightly", 'a', true), run_of("release", 'a', true, kNow, 0.993)},
                                            recorded('a'), kNow - 50 * kHourMs));
    CHECK(message.find("llm-70b's eval would fall below production's accepted threshold: 0.9930 of the reference on "
                       "revision a") != std::string::npos);
    // A served model no gate ran is no evidence either.
    GateRun nightly = run_of("nightly", 'a', true);
    GateRun release = run_of("release", 'a', true, kNow, 1.0);
    for (auto* run : {&nightly, &release}) {
      for (auto& m : run->models) m.model = "resnet";
    }
    CHECK(refusal(decide_promotion(snapshot, request('a', "production"), {nightly, release},
                                   recorded('a'), kNow - 50 * kHourMs))
              .find("none of the gate runs (nightly, release) ran it") != std::string::npos);
  }
  SUBCASE("the compatibility matrix") {
    auto message = refusal(decide_promotion(snapshot_of("", ""), request('e', "dev"), {run_of("nightly", 'e', true)},
                                            recorded('e', "fw-0.9"), std::nullopt));
    CHECK(message.find("the compatibility matrix forbids bundle eeeeeeeeeeee: on hardware revision a") !=
          std::string::npos);
  }
  SUBCASE("one-way firmware needs a recorded override") {
    auto snapshot = snapshot_of("", "");
    auto message = refusal(decide_promotion(snapshot, request('c', "dev"), {run_of("nightly", 'c', true)},
                                            recorded('c', "fw-3.0"), std::nullopt));
    CHECK(message.find("one-way firmware (blows anti-rollback fuse 4)") != std::string::npos);
    CHECK(message.find("--override-one-way REASON") != std::string::npos);
    auto overridden = decide_promotion(snapshot, request('c', "dev", "fleet-wide fuse change approved in REL-12"),
                                       {run_of("nightly", 'c', true)}, recorded('c', "fw-3.0"), std::nullopt);
    REQUIRE(overridden.has_value());
    CHECK(promotion_message(*overridden).find("Kiln-One-Way-Override: fleet-wide fuse change approved in REL-12\n") !=
          std::string::npos);
    auto needless = decide_promotion(snapshot, request('a', "dev", "why not"), {run_of("nightly", 'a', true)},
                                     recorded('a'), std::nullopt);
    REQUIRE_FALSE(needless.has_value());
    CHECK(needless.error().code == Errc::invalid_argument);
  }
  SUBCASE("the file must pin what was qualified") {
    auto result = decide_promotion(snapshot_of("", ""), request('a', "dev"), {run_of("nightly", 'a', true)},
                                   recorded('a', "fw-2.2"), std::nullopt);
    REQUIRE_FALSE(result.has_value());
    CHECK(result.error().code == Errc::integrity);
    CHECK(result.error().message.find("pins firmware fw-2.1, but the coordinator's bundle aaaaaaaaaaaa has firmware "
                                      "fw-2.2") != std::string::npos);
  }
  SUBCASE("unknown environment, missing bundle file, already there") {
    CHECK(decide_promotion(snapshot_of("", ""), request('a', "qa"), {}, recorded('a'), std::nullopt).error().code ==
          Errc::not_found);
    CHECK(decide_promotion(snapshot_of("", ""), request('7', "dev"), {}, recorded('7'), std::nullopt).error().code ==
          Errc::not_found);
    CHECK(refusal(decide_promotion(snapshot_of(bundle_id('a'), ""), request('a', "dev"), {}, recorded('a'),
                                   std::nullopt))
              .find("dev already runs bundle aaaaaaaaaaaa") != std::string::npos);
  }
}

TEST_CASE("approval by another person of an approving role; merge only when approved and on main's tip") {
  auto snapshot = snapshot_of("", "");
  const EnvironmentFile& staging = snapshot.environments.at("staging");
  ProposedPromotion proposed;
  proposed.branch = "promote/staging/aaaaaaaaaaaa";
  proposed.environment = "staging";
  proposed.bundle_id = bundle_id('a');
  proposed.promoted_by = kAlice;
  proposed.based_on_main_tip = true;

  CHECK(decide_approval(proposed, staging, kAlice).error().code == Errc::unauthorized);
  CHECK(decide_approval(proposed, staging, Actor{"dana", "developer"}).error().code == Errc::unauthorized);
  CHECK(decide_merge(proposed, staging).error().message.find("is not approved") != std::string::npos);
  CHECK(decide_approval(proposed, staging, kBob).has_value());
  proposed.approvals.push_back(kBob);
  CHECK(decide_approval(proposed, staging, kBob).error().code == Errc::conflict);
  CHECK(decide_merge(proposed, staging).has_value());

  // An approval trailer written by hand by the author, or by a role that may not approve, counts for nothing.
  proposed.approvals = {kAlice, Actor{"dana", "developer"}};
  CHECK_FALSE(decide_merge(proposed, staging).has_value());

  proposed.approvals = {kBob};
  proposed.based_on_main_tip = false;
  auto moved = decide_merge(proposed, staging);
  REQUIRE_FALSE(moved.has_value());
  CHECK(moved.error().message.find("rebase") != std::string::npos);

  proposed.trailers = {"Kiln-Action: promote", "Kiln-Environment: staging"};
  proposed.promotion_subject = "Promote aaaaaaaaaaaa to staging";
  const std::string message = merge_message(proposed, kBob);
  CHECK(message.starts_with("Promote aaaaaaaaaaaa to staging\n"));
  CHECK(message.find("Kiln-Approved-By: bob (admin)\nKiln-Promotion: promote/staging/aaaaaaaaaaaa\nKiln-Merged-By: bob "
                     "(admin)\n") != std::string::npos);
  CHECK(actor_from_string("bob (admin)")->role == "admin");
  CHECK_FALSE(actor_from_string("bob").has_value());
}

EnvironmentChange change(const std::string& commit, char to, char from, const std::string& action,
                         const std::string& reverts = "") {
  EnvironmentChange c;
  c.commit = commit;
  c.environment = "production";
  c.bundle_id = to == '-' ? "" : bundle_id(to);
  c.previous_bundle_id = from == '-' ? "" : bundle_id(from);
  c.action = action;
  c.reverts = reverts;
  return c;
}

TEST_CASE("rollback reverts the last promotion not yet reverted, never past one-way firmware") {
  // Newest first: a promoted, then b, then b rolled back; production runs a.
  std::vector<EnvironmentChange> history = {change("m3", 'a', 'b', "rollback", "m2"), change("m2", 'b', 'a', "promote"),
                                            change("m1", 'a', '-', "promote")};
  auto rollback = decide_rollback(snapshot_of("", "", bundle_id('a')), "production", history, kBob);
  REQUIRE(rollback.has_value());
  CHECK(rollback->revert_commit == "m1");
  CHECK(rollback->to_bundle_id.empty());
  CHECK(rollback_message(*rollback, kBob).find("Kiln-Reverts: m1\nKiln-Rolled-Back-By: bob (admin)\n") !=
        std::string::npos);

  auto one_way = decide_rollback(snapshot_of("", "", bundle_id('c')), "production",
                                 {change("m4", 'c', 'a', "promote")}, kBob);
  REQUIRE_FALSE(one_way.has_value());
  CHECK(one_way.error().message.find("cannot be rolled back past bundle cccccccccccc: its firmware is one-way (blows "
                                     "anti-rollback fuse 4); fix forward") != std::string::npos);

  CHECK(decide_rollback(snapshot_of("", ""), "production", {}, kBob).error().code == Errc::not_found);
  CHECK(decide_rollback(snapshot_of("", "", bundle_id('a')), "production", history, Actor{"dana", "developer"})
            .error()
            .code == Errc::unauthorized);
  // A hand edit after the promotion: the revert would not give what it says.
  CHECK(decide_rollback(snapshot_of("", "", bundle_id('b')), "production", {change("m1", 'a', '-', "promote")}, kBob)
            .error()
            .code == Errc::conflict);
}

TEST_CASE("a bundle arrived with the oldest change of the run that left it there") {
  std::vector<EnvironmentChange> history = {change("m3", 'a', 'b', "rollback"), change("m2", 'b', 'a', "promote"),
                                            change("m1", 'a', '-', "promote")};
  history[0].committed_at_ms = 300;
  history[1].committed_at_ms = 200;
  history[2].committed_at_ms = 100;
  CHECK(arrived_at_ms(history, bundle_id('a')) == 300);
  CHECK_FALSE(arrived_at_ms(history, bundle_id('b')).has_value());
  CHECK(promotion_record_key(history[0]) == "production@m3");
  CHECK(promotion_record_json(history[0])["action"] == "rollback");
}

TEST_CASE("a run report reads as gate evidence") {
  nlohmann::json report = {{"schema", "kiln.qualification-run/1"}, {"run_id", "nightly-1"}, {"tier", "nightly"},
                           {"candidate_bundle_id", bundle_id('a')}, {"finished", true}, {"passed", true},
                           {"finished_at_ms", 5},
                           {"models", {{{"model", "m"}, {"revision", "a"}, {"verdict", "passed"}, {"detail", ""},
                                        {"eval", {{"score", 0.8}, {"reference", 0.81}}}}}}};
  auto run = gate_run_from_json(report);
  REQUIRE(run.has_value());
  CHECK(run->models.at(0).eval_score == doctest::Approx(0.8));
  report.erase("passed");
  CHECK(gate_run_from_json(report).error().code == Errc::bad_message);
}

}  // namespace
}  // namespace kiln::release
