#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "qualification/bisect.h"

namespace q = kiln::qualification;

namespace {

std::vector<std::string> candidates(std::size_t n) {
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back("c" + std::to_string(i));
  return ids;
}

using Oracle = std::function<q::ProbeVerdict(std::size_t index, int attempt)>;

q::ProbeVerdict monotone(std::size_t index, std::size_t culprit) {
  return index < culprit ? q::ProbeVerdict::good : q::ProbeVerdict::bad;
}

struct Run {
  q::BisectResult result;
  std::size_t rounds = 0;
  std::size_t max_parallel = 0;
};

// Synchronous rounds: start up to k probes, answer them all, repeat.
Run run_rounds(std::size_t n, std::size_t k, const Oracle& oracle, q::BisectOptions options = {}) {
  auto bisection = q::Bisection::start(candidates(n), options);
  REQUIRE(bisection.has_value());
  Run run;
  for (int guard = 0; guard < 1000; ++guard) {
    const q::BisectPlan plan = bisection->next_probes(k);
    if (plan.finished) break;
    REQUIRE(!plan.start.empty());
    ++run.rounds;
    run.max_parallel = std::max(run.max_parallel, plan.start.size());
    for (const auto& probe : plan.start) {
      REQUIRE(bisection->on_probe_result(probe.change_index, oracle(probe.change_index, probe.attempt)).has_value());
    }
  }
  REQUIRE(bisection->finished());
  run.result = *bisection->result();
  // The bisection counts its own rounds as the caller does.
  REQUIRE(run.result.rounds == run.rounds);
  REQUIRE(bisection->rounds() == run.rounds);
  return run;
}

}  // namespace

TEST_CASE("expected rounds are log base k+1 of the candidates, rounded up") {
  CHECK(q::expected_rounds(400, 1) == 9);
  CHECK(q::expected_rounds(400, 3) == 5);
  CHECK(q::expected_rounds(400, 7) == 3);
  CHECK(q::expected_rounds(400, 19) == 2);
  CHECK(q::expected_rounds(1, 4) == 0);
  CHECK(q::expected_rounds(2, 1) == 1);
}

TEST_CASE("with 400 candidates the k-ary search finds every culprit within log_{k+1}(400) rounds") {
  for (std::size_t k : {1u, 2u, 3u, 7u, 15u}) {
    std::size_t worst = 0;
    double total = 0;
    for (std::size_t culprit = 0; culprit < 400; ++culprit) {
      const Run run = run_rounds(400, k, [&](std::size_t i, int) { return monotone(i, culprit); });
      REQUIRE(run.result.outcome == q::BisectOutcome::culprit_found);
      REQUIRE(run.result.culprit_index == culprit);
      REQUIRE(run.result.culprit_change_id == "c" + std::to_string(culprit));
      REQUIRE(run.max_parallel <= k);
      worst = std::max(worst, run.rounds);
      total += static_cast<double>(run.rounds);
    }
    INFO("k = " << k << ", mean rounds " << total / 400 << ", worst " << worst);
    // No search learning one of k+1 answers per round can do better in the worst case, and the
    // mean stays within a round of log_{k+1}(400) (8.72, 5.79, 4.72, 3, 2.72 for these k).
    CHECK(worst == q::expected_rounds(400, k));
    CHECK(total / 400 > static_cast<double>(worst) - 1);
  }
}

TEST_CASE("the last candidate is the culprit when everything before it is good, and one candidate needs no probe") {
  const Run last = run_rounds(400, 7, [](std::size_t i, int) { return monotone(i, 399); });
  CHECK(last.result.culprit_index == 399);
  CHECK(last.result.detail.find("c398") != std::string::npos);

  auto single = q::Bisection::start({"only"});
  REQUIRE(single.has_value());
  const q::BisectPlan plan = single->next_probes(8);
  CHECK(plan.finished);
  CHECK(plan.start.empty());
  CHECK(single->result()->culprit_change_id == "only");
}

TEST_CASE("the result names every candidate and, for each probe, the round that started it") {
  const Run run = run_rounds(100, 3, [](std::size_t i, int) { return monotone(i, 42); });
  CHECK(run.result.candidates == candidates(100));
  std::size_t last_round = 0;
  std::map<std::size_t, std::size_t> probes_per_round;
  for (const auto& record : run.result.evidence) {
    CHECK(record.round >= last_round);  // synchronous rounds: answers arrive round by round
    last_round = record.round;
    ++probes_per_round[record.round];
  }
  CHECK(last_round == run.rounds);
  for (const auto& [round, probes] : probes_per_round) CHECK(probes <= 3);
  const nlohmann::json json = q::to_json(run.result);
  CHECK(json.at("candidates").size() == 100);
  CHECK(json.at("probes").at(0).at("round") == 1);
}

TEST_CASE("inconclusive probes are retried, bounded, and the evidence keeps every verdict") {
  // Every change needs two probes for an answer.
  const Run run = run_rounds(400, 3, [](std::size_t i, int attempt) {
    return attempt == 1 ? q::ProbeVerdict::inconclusive : monotone(i, 123);
  });
  CHECK(run.result.outcome == q::BisectOutcome::culprit_found);
  CHECK(run.result.culprit_index == 123);
  std::map<std::size_t, int> attempts;
  for (const auto& record : run.result.evidence) attempts[record.change_index] = std::max(attempts[record.change_index], record.attempt);
  for (const auto& [index, attempt] : attempts) CHECK(attempt <= 2);
  CHECK(run.result.evidence.size() == run.result.probes_started);
}

TEST_CASE("a change that never gives an answer is skipped, and next to the culprit it leaves suspects") {
  q::BisectOptions options;
  options.max_attempts_per_change = 2;
  // The culprit is 100; change 99 is always inconclusive (it does not build, say).
  const Run run = run_rounds(400, 3, [](std::size_t i, int) {
    return i == 99 ? q::ProbeVerdict::inconclusive : monotone(i, 100);
  }, options);
  CHECK(run.result.outcome == q::BisectOutcome::ambiguous);
  CHECK(run.result.suspects == std::vector<std::string>{"c99", "c100"});
  CHECK(run.result.culprit_index == 100);
  int probes_of_99 = 0;
  for (const auto& record : run.result.evidence) probes_of_99 += record.change_index == 99;
  CHECK(probes_of_99 == 2);

  // Skipping a change away from the culprit does not matter.
  const Run far = run_rounds(400, 3, [](std::size_t i, int) {
    return i == 50 ? q::ProbeVerdict::inconclusive : monotone(i, 300);
  }, options);
  CHECK(far.result.outcome == q::BisectOutcome::culprit_found);
  CHECK(far.result.culprit_index == 300);
}

TEST_CASE("a result that makes running probes pointless cancels them; their late answers are evidence only") {
  auto bisection = q::Bisection::start(candidates(100));
  REQUIRE(bisection.has_value());
  const q::BisectPlan first = bisection->next_probes(3);
  REQUIRE(first.start.size() == 3);
  const std::size_t low = first.start[0].change_index;
  const std::size_t high = first.start[2].change_index;
  REQUIRE(bisection->on_probe_result(low, q::ProbeVerdict::bad).has_value());
  CHECK(bisection->first_bad() == low);
  CHECK(bisection->running().empty());
  const q::BisectPlan second = bisection->next_probes(0);
  CHECK(second.cancel.size() == 2);
  CHECK(second.start.empty());
  // A late "good" above a known bad contradicts it: recorded, counted, state unchanged.
  REQUIRE(bisection->on_probe_result(high, q::ProbeVerdict::good).has_value());
  CHECK(bisection->first_bad() == low);
  CHECK(bisection->first_unknown() == 0);
  CHECK(bisection->on_probe_result(7, q::ProbeVerdict::good).error().code == kiln::Errc::conflict);
  CHECK(bisection->on_probe_result(1000, q::ProbeVerdict::good).error().code == kiln::Errc::invalid_argument);
}

TEST_CASE("a round is planned only once every probe of the one before has answered") {
  const std::size_t culprit = 271;
  auto bisection = q::Bisection::start(candidates(400));
  REQUIRE(bisection.has_value());
  const q::BisectPlan first = bisection->next_probes(3);
  REQUIRE(first.start.size() == 3);
  REQUIRE(bisection->on_probe_result(first.start[0].change_index, monotone(first.start[0].change_index, culprit)));
  // A node is free again, but a round planned around the running probes would split the range
  // unevenly: nothing starts until the round is complete.
  CHECK(bisection->next_probes(3).start.empty());
  for (std::size_t i = 1; i < 3; ++i) {
    REQUIRE(bisection->on_probe_result(first.start[i].change_index, monotone(first.start[i].change_index, culprit)));
  }
  CHECK(bisection->next_probes(3).start.size() == 3);
  CHECK(bisection->rounds() == 2);
}

TEST_CASE("every range and every culprit is found within ceil(log_{k+1}(n)) rounds, the bound it reports") {
  for (std::size_t n = 1; n <= 130; ++n) {
    for (std::size_t k = 1; k <= 6; ++k) {
      for (std::size_t culprit = 0; culprit < n; ++culprit) {
        const Run run = run_rounds(n, k, [&](std::size_t i, int) { return monotone(i, culprit); });
        REQUIRE(run.result.culprit_index == culprit);
        INFO("n " << n << ", k " << k << ", culprit " << culprit);
        REQUIRE(run.rounds <= q::expected_rounds(n, k));
        REQUIRE(run.result.round_bound == q::expected_rounds(n, k));
      }
    }
  }
  // The case: change 23 of 41 with 3 probes a round takes 3 rounds of at most 3 probes.
  const Run change_23 = run_rounds(41, 3, [](std::size_t i, int) { return monotone(i, 22); });
  CHECK(change_23.result.culprit_change_id == "c22");
  CHECK(change_23.rounds == 3);
  CHECK(change_23.result.probes_started <= 9);
  CHECK(change_23.result.probes_per_round == 3);
}

TEST_CASE("an inconclusive answer adds at most one round per round it happens in") {
  std::uint64_t state = 7;
  auto coin = [&state] {  // a fixed linear congruential sequence: the same draws every time
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % 100;
  };
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t n = 2 + coin() * 4;
    const std::size_t k = 1 + coin() % 5;
    const std::size_t culprit = coin() * n / 100;
    const std::uint64_t flake_percent = coin() % 40;
    const Run run = run_rounds(n, k, [&](std::size_t i, int) {
      return coin() < flake_percent ? q::ProbeVerdict::inconclusive : monotone(i, culprit);
    });
    INFO("n " << n << ", k " << k << ", culprit " << culprit << ", flakes " << flake_percent << "%");
    std::set<std::size_t> inconclusive_rounds;
    for (const auto& record : run.result.evidence) {
      // An answer that arrived after its probe was cancelled cost nothing.
      if (record.verdict == q::ProbeVerdict::inconclusive && !record.obsolete) inconclusive_rounds.insert(record.round);
    }
    REQUIRE(run.result.round_bound == q::expected_rounds(n, k) + inconclusive_rounds.size());
    REQUIRE(run.rounds <= run.result.round_bound);
  }
}

TEST_CASE("the probe budget ends a bisection that cannot converge") {
  q::BisectOptions options;
  options.max_total_probes = 5;
  const Run run = run_rounds(400, 1, [](std::size_t, int) { return q::ProbeVerdict::inconclusive; }, options);
  CHECK(run.result.outcome == q::BisectOutcome::ambiguous);
  CHECK(run.result.probes_started == 5);
  CHECK(run.result.detail.find("budget") != std::string::npos);
  const nlohmann::json json = q::to_json(run.result);
  CHECK(json["outcome"] == "ambiguous");
  CHECK(json["probes"].size() == 5);
  CHECK(json["rounds"] == 5);
  CHECK(q::Bisection::start({}).error().code == kiln::Errc::invalid_argument);
  CHECK_FALSE(q::Bisection::start({"a", "a"}).has_value());
}

TEST_CASE("a probe judged by the performance gate on real samples: a 3% drop is bad, noise is good") {
  std::vector<double> baseline;
  std::vector<double> same;
  std::vector<double> slower;
  for (int i = 0; i < 10; ++i) {
    const double noise = 1.0 + 0.002 * ((i * 7) % 5 - 2);
    baseline.push_back(1000.0 * noise);
    same.push_back(1000.0 * (1.0 + 0.002 * ((i * 3) % 5 - 2)));
    slower.push_back(970.0 * noise);
  }
  const kiln::stats::PerfGateOptions options;
  auto judge = [&](const std::vector<double>& candidate) {
    auto comparison = kiln::stats::compare(baseline, candidate, options, 1);
    REQUIRE(comparison.has_value());
    return q::probe_verdict_from(
        kiln::stats::decide(*comparison, comparison->test.p_value, options.alpha, options));
  };
  CHECK(judge(slower) == q::ProbeVerdict::bad);
  CHECK(judge(same) == q::ProbeVerdict::good);
  CHECK(q::probe_verdict_from(kiln::stats::Verdict::inconclusive) == q::ProbeVerdict::inconclusive);
  CHECK(q::probe_verdict_from_correctness(false) == q::ProbeVerdict::bad);
}
