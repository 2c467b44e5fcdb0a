#include <doctest/doctest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qualification/run_report.h"
#include "report/pages.h"
#include "tests/unit/report/report_samples.h"

namespace q = kiln::qualification;
namespace r = kiln::report;
using json = nlohmann::json;
using kiln::testing::occurrences;
using kiln::testing::sample_json;
using kiln::testing::SampleRun;
using kiln::testing::svg_with_id;

namespace {

bool has(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// Earlier nightlies of the same model, a day apart, before the sample run.
std::vector<r::RunDigest> earlier_runs(std::size_t count) {
  std::vector<r::RunDigest> runs;
  for (std::size_t i = 0; i < count; ++i) {
    SampleRun run;
    run.run_id = fmt::format("nightly-earlier-{}", i);
    run.started_at_ms = SampleRun{}.started_at_ms - static_cast<kiln::TimeMs>(count - i) * 86'400'000;
    runs.push_back(r::digest_of(sample_json(run)));
  }
  return runs;
}

}  // namespace

TEST_CASE("the run page says the verdict first, then the bundle, the models, the tickets and the evidence") {
  const json report = sample_json();
  const std::string page = r::render_run_page(report, {});
  const auto verdict = page.find("id=\"verdict\"");
  const auto bundle = page.find("id=\"bundle\"");
  const auto models = page.find("id=\"models\"");
  const auto tickets = page.find("id=\"tickets\"");
  const auto evidence = page.find("id=\"evidence\"");
  REQUIRE(verdict != std::string::npos);
  CHECK(verdict < bundle);
  CHECK(bundle < models);
  CHECK(models < tickets);
  CHECK(tickets < evidence);
  CHECK(has(page, "<h1><span aria-hidden=\"true\">\u2717</span> failed: nightly nightly-2</h1>"));
  CHECK(has(page, "2 of 2 model runs fail it: 1 correctness_regression, 1 performance_regression"));
  // The bundle's versions, the baseline's next to them, what differs marked in words.
  CHECK(has(page, "<th scope=\"row\">compiler</th><td>cc-k3</td><td class=\"changed\">cc-0 <small>(differs)</small>"));
  CHECK(has(page, "<th scope=\"row\">firmware</th><td>fmw-1</td><td>fmw-1</td>"));
  CHECK(has(page, "6 changes, the last <code>k6</code>."));
  // The model's row links its evidence and its ticket; the ticket's evidence is on the page.
  const std::string ticket_id = report.at("tickets").at(0).at("id");
  CHECK(has(page, "<a href=\"#model-0\">mlp-bf16-it</a>"));
  CHECK(has(page, fmt::format("<a href=\"#ticket-0\">{}</a>", ticket_id)));
  CHECK(has(page, "<article id=\"ticket-0\">"));
  CHECK(has(page, "&lt;i&gt;evidence&lt;/i&gt;"));
  CHECK(has(page, "interval"));
  // Each node with the backend its result was made on, as the report recorded it.
  CHECK(has(page, "ran on n01 (sim), n02"));
  CHECK(has(page, "\u2713 passed: 0.905 \u2265 0.9009 required"));  // the eval, 99% of 0.91
  // Offline: nothing loads from anywhere, and no script runs.
  CHECK(has(page, "Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\""));
  CHECK_FALSE(has(page, "<script"));
  CHECK_FALSE(has(page, "http://"));
  CHECK_FALSE(has(page, "https://"));
  CHECK(has(page, "<a href=\"index.html\">All runs</a>"));
  CHECK(has(page, "<a href=\"nightly-2.json\">"));
}

TEST_CASE("every plot has as many points as the report has data, each plot titled for screen readers") {
  const json report = sample_json();
  const auto history = earlier_runs(3);
  const std::string page = r::render_run_page(report, history);
  const json& slow = report.at("models").at(0);
  const json& performance = slow.at("performance");

  const std::string throughput = svg_with_id(page, "throughput-0");
  REQUIRE_FALSE(throughput.empty());
  CHECK(has(throughput, "role=\"img\" aria-labelledby=\"throughput-0-title throughput-0-desc\""));
  CHECK(has(throughput, "<title id=\"throughput-0-title\">Throughput of mlp-bf16-it on revision a</title>"));
  CHECK(occurrences(throughput, "data-series=\"history\"") == 3);
  CHECK(occurrences(throughput, "data-series=\"baseline\"") == performance.at("initial_samples").at("baseline").size());
  CHECK(occurrences(throughput, "data-series=\"candidate\"") == performance.at("initial_samples").at("candidate").size());
  CHECK(occurrences(throughput, "data-series=\"confirmation-baseline\"") ==
        performance.at("confirmation_samples").at("baseline").size());
  CHECK(occurrences(throughput, "data-series=\"confirmation-candidate\"") ==
        performance.at("confirmation_samples").at("candidate").size());
  CHECK(has(throughput, "accepted baseline " + report.at("baseline_bundle_ids").at("a").get<std::string>().substr(0, 12)));
  // Earlier runs' points link to their pages.
  CHECK(has(throughput, "<a href=\"nightly-earlier-0.html\">"));

  const std::string bisection = svg_with_id(page, "bisection-0");
  REQUIRE_FALSE(bisection.empty());
  CHECK(occurrences(bisection, "data-series=\"probe\"") == slow.at("bisection").at("probes").size());
  CHECK(has(bisection, "culprit k3"));

  const json& training = report.at("models").at(1).at("training");
  const std::string loss = svg_with_id(page, "loss-1");
  REQUIRE_FALSE(loss.empty());
  CHECK(occurrences(loss, "data-series=\"loss\"") == training.at("loss_curve").size());
  // The point outside the band is a cross (a shape, not only a colour), the others circles.
  CHECK(occurrences(loss, "<path class=\"mark stroked series-loss\"") == 1);
  CHECK(occurrences(loss, "<circle class=\"mark filled series-loss\"") == training.at("loss_curve").size() - 1);
  CHECK(has(loss, "class=\"band\""));
  CHECK(has(page, "The 20 points as a table (1 outside the band)"));
  CHECK(has(page, "<td>65</td><td>1.54</td><td>1.648</td><td>7.00%</td><td>OUTSIDE the band</td>"));
  // The training model measured no throughput and has no history: no throughput plot.
  CHECK(svg_with_id(page, "throughput-1").empty());
}

TEST_CASE("a run without history plots only its own samples; the index without runs says so") {
  const json report = sample_json();
  const std::string page = r::render_run_page(report, {});
  const std::string throughput = svg_with_id(page, "throughput-0");
  REQUIRE_FALSE(throughput.empty());
  CHECK(occurrences(throughput, "data-series=\"history\"") == 0);
  CHECK(occurrences(throughput, "data-series=\"candidate\"") == 20);

  const std::string index = r::render_index_page({});
  CHECK(has(index, "0 runs, newest first"));
  CHECK(has(index, "No run has measured a throughput yet."));
  CHECK_FALSE(has(index, "<svg"));
}

TEST_CASE("a report without training has no loss plot and no eval") {
  SampleRun run;
  run.training = false;
  const std::string page = r::render_run_page(sample_json(run), {});
  CHECK_FALSE(has(page, "data-plot=\"loss\""));
  CHECK_FALSE(has(page, "<h4>Training</h4>"));
  CHECK(has(page, "data-plot=\"throughput\""));
  CHECK(has(page, "1 of 1 model runs fail it: 1 performance_regression"));
}

TEST_CASE("a report from before the pages still renders: estimated history, probes in arrival order") {
  const json old = kiln::testing::as_old_report(sample_json());
  const std::string page = r::render_run_page(old, {});
  CHECK(has(page, "This report does not hold its versions: <code>kiln bundle show"));
  // No samples: nothing of this run to plot and no history: no throughput plot.
  CHECK(svg_with_id(page, "throughput-0").empty());
  CHECK_FALSE(has(page, "data-plot=\"loss\""));
  const std::string bisection = svg_with_id(page, "bisection-0");
  CHECK(occurrences(bisection, "data-series=\"probe\"") == old.at("models").at(0).at("bisection").at("probes").size());

  // In another run's history, an old report's throughput is estimated from its comparison.
  const r::RunDigest digest = r::digest_of(old);
  REQUIRE(digest.throughputs.size() == 1);
  CHECK(digest.throughputs[0].estimated);
  const json& initial = old.at("models").at(0).at("performance").at("initial");
  CHECK(digest.throughputs[0].throughput ==
        doctest::Approx(initial.at("baseline_median").get<double>() + initial.at("hodges_lehmann").get<double>()));
  SampleRun later;
  later.run_id = "nightly-3";
  later.started_at_ms += 86'400'000;
  const std::string later_page = r::render_run_page(sample_json(later), std::vector<r::RunDigest>{digest});
  const std::string throughput = svg_with_id(later_page, "throughput-0");
  CHECK(occurrences(throughput, "data-series=\"history\"") == 1);
  CHECK(has(throughput, "<circle class=\"mark hollow series-history\""));
  CHECK(has(throughput, "estimated from the comparison"));

  // Not even the fields every report had: still a page.
  const std::string bare = r::render_run_page(json{{"run_id", 42}, {"models", "none"}}, {});
  CHECK(has(bare, "</html>"));
}

TEST_CASE("no string from a report can inject markup into the pages") {
  SampleRun run;
  run.run_id = "nightly-</title><script>alert(1)</script>";
  run.model = "mlp-<script>alert(2)</script>";
  run.owner_team = "\"><img src=x onerror=alert(3)>";
  run.ticket_title = "<b>bold</b> & 'quoted' \"title\"";
  run.culprit = "k3'><svg onload=alert(4)>";
  const json report = sample_json(run);
  const std::string page = r::render_run_page(report, earlier_runs(2));
  const std::string index = r::render_index_page(std::vector<r::RunDigest>{r::digest_of(report)});
  for (const std::string* text : {&page, &index}) {
    CHECK_FALSE(has(*text, "<script"));
    CHECK_FALSE(has(*text, "<img"));
    CHECK_FALSE(has(*text, "<b>bold"));
    CHECK_FALSE(has(*text, "'><svg"));
    CHECK_FALSE(has(*text, "\"><img"));
  }
  CHECK(has(page, "mlp-&lt;script&gt;alert(2)&lt;/script&gt;"));
  CHECK(has(page, "&quot;&gt;&lt;img src=x onerror=alert(3)&gt;"));
  CHECK(has(page, "&lt;b&gt;bold&lt;/b&gt; &amp; &#39;quoted&#39; &quot;title&quot;"));
  CHECK(has(page, "culprit k3&#39;&gt;&lt;svg onload=alert(4)&gt;"));
  // The run's file names carry none of it either.
  const std::string name = r::run_page_name(run.run_id);
  CHECK(name.find_first_of("<>\"'/ ") == std::string::npos);
  CHECK(has(index, "href=\"" + name + "\""));
}

TEST_CASE("run verdicts say why: passed, failed, error, running") {
  q::RunReport report = kiln::testing::sample_report();
  CHECK(r::run_verdict(q::to_json(report)).word == "failed");

  for (auto& m : report.models) m.verdict = q::ModelVerdict::passed;
  report.passed = true;
  const r::RunVerdict passed = r::run_verdict(q::to_json(report));
  CHECK(passed.word == "passed");
  CHECK(passed.reason == "2 model runs: 2 passed");

  for (auto& m : report.models) m.verdict = q::ModelVerdict::error;
  report.passed = false;
  const r::RunVerdict error = r::run_verdict(q::to_json(report));
  CHECK(error.word == "error");
  CHECK(error.reason == "2 of 2 model runs could not be measured: their jobs did not run");

  report.finished = false;
  report.models[0].verdict = q::ModelVerdict::pending;
  const r::RunVerdict running = r::run_verdict(q::to_json(report));
  CHECK(running.word == "running");
  CHECK(running.reason == "1 of 2 model runs have a verdict so far");

  // A run that ended before any job: refused by the unit tier (failed), or unable to run (error).
  json refused = {{"finished", true}, {"passed", false}, {"models", json::array()},
                  {"summary", "kiln smoke s1: FAILED (candidate abc)\n  change c17 was rejected by the unit tier\n"}};
  CHECK(r::run_verdict(refused).word == "failed");
  CHECK(r::run_verdict(refused).reason == "change c17 was rejected by the unit tier");
  json unrunnable = refused;
  unrunnable["reason"] = "cannot run: bundle b1 is not recorded";
  unrunnable["could_not_run"] = true;
  CHECK(r::run_verdict(unrunnable).word == "error");
  CHECK(r::run_verdict(unrunnable).reason == "cannot run: bundle b1 is not recorded");
}

TEST_CASE("a run's history is the runs that started before it, the latest kHistoryRuns") {
  auto runs = earlier_runs(r::kHistoryRuns + 5);
  SampleRun later;
  later.run_id = "nightly-later";
  later.started_at_ms += 86'400'000;
  runs.push_back(r::digest_of(sample_json(later)));
  const std::string page = r::render_run_page(sample_json(), runs);
  CHECK(occurrences(svg_with_id(page, "throughput-0"), "data-series=\"history\"") == r::kHistoryRuns);
  CHECK_FALSE(has(page, "nightly-later.html"));
  CHECK_FALSE(has(page, "nightly-earlier-0.html"));  // the oldest, beyond kHistoryRuns
}

TEST_CASE("the index lists every run newest first and each model's throughput across them") {
  auto runs = earlier_runs(4);
  runs.push_back(r::digest_of(sample_json()));
  const std::string index = r::render_index_page(runs);
  const auto newest = index.find("<a href=\"nightly-2.html\">nightly-2</a>");
  const auto oldest = index.find("<a href=\"nightly-earlier-0.html\">nightly-earlier-0</a>");
  REQUIRE(newest != std::string::npos);
  CHECK(newest < oldest);
  CHECK(has(index, "<td>nightly</td><td><span aria-hidden=\"true\">\u2717</span> failed</td>"));
  CHECK(has(index, "<td>4 min 32 s</td>"));
  const std::string graph = svg_with_id(index, "history-0");
  REQUIRE_FALSE(graph.empty());
  CHECK(occurrences(graph, "data-series=\"history\"") == 5);
  CHECK(occurrences(graph, "<a href=\"") == 5);
  CHECK(has(index, "<figure id=\"model-0\"><figcaption>mlp-bf16-it on revision a</figcaption>"));
}

TEST_CASE("the pages keep the latest runs and each model's latest measurements; the index lists the latest") {
  // Many presubmits of another model, and a nightly model measured once a day long before them:
  // its plot still shows its last kHistoryRuns nights.
  auto runs = earlier_runs(r::kHistoryRuns + 10);
  const kiln::TimeMs first_presubmit_ms = SampleRun{}.started_at_ms;
  for (std::size_t i = 0; i < r::kIndexRuns + 50; ++i) {
    r::RunDigest presubmit;
    presubmit.run_id = fmt::format("presubmit-{}", i);
    presubmit.tier = "presubmit";
    presubmit.started_at_ms = first_presubmit_ms + static_cast<kiln::TimeMs>(i) * 60'000;
    presubmit.throughputs.push_back({"attention-bf16", "a", "pass", 100.0 + static_cast<double>(i % 7), false});
    runs.push_back(std::move(presubmit));
  }
  const auto kept = r::runs_for_pages(runs);
  CHECK(kept.size() == r::kIndexRuns + r::kHistoryRuns);
  CHECK(kept.front().run_id == fmt::format("presubmit-{}", r::kIndexRuns + 49));  // newest first
  const auto kept_run = [&](const std::string& id) {
    return std::any_of(kept.begin(), kept.end(), [&](const r::RunDigest& run) { return run.run_id == id; });
  };
  CHECK(kept_run("nightly-earlier-10"));
  CHECK_FALSE(kept_run("nightly-earlier-9"));  // the nightly model's 91st last
  CHECK_FALSE(kept_run("presubmit-49"));       // neither among the latest nor needed by a plot

  const std::string index = r::render_index_page(kept);
  CHECK(has(index, fmt::format("The latest {} runs, newest first (older runs keep their pages here", r::kIndexRuns)));
  CHECK(occurrences(index, "<td>presubmit</td>") == r::kIndexRuns);
  CHECK_FALSE(has(index, "<a href=\"nightly-earlier-10.html\">nightly-earlier-10</a></td>"));
  // ... and the plots are those of all the runs: the same as from the runs that were not kept.
  CHECK(svg_with_id(index, "history-0") == svg_with_id(r::render_index_page(runs), "history-0"));
  CHECK(svg_with_id(index, "history-1") == svg_with_id(r::render_index_page(runs), "history-1"));
  CHECK(occurrences(svg_with_id(index, "history-1"), "data-series=\"history\"") == r::kHistoryRuns);
}

TEST_CASE("a report holds its bundles' versions and change counts, not their change lists, however long the history") {
  // Two months of ci-day: 24,000 changes with commit-length ids, in bundles recorded as
  // kiln.bundle/1, which list their changes. Held whole, the candidate's and the baseline's
  // change lists alone would be 2 MB, past what a record may hold.
  std::vector<std::string> history;
  for (int i = 0; i < 24'000; ++i) history.push_back(fmt::format("{:040x}", i));
  q::RunReport report = kiln::testing::sample_report();
  q::Bundle candidate = *report.candidate_bundle;
  candidate.listed_change_ids = history;
  report.candidate_bundle = q::seal(candidate);
  q::Bundle baseline = report.baseline_bundles.at("a");
  baseline.listed_change_ids.emplace(history.begin(), history.end() - 5);
  report.baseline_bundles["a"] = q::seal(baseline);
  const json recorded = q::to_json(report);
  CHECK(recorded.dump().size() < 64 * 1024);
  CHECK(recorded.at("candidate_bundle").at("change_count") == 24'000);
  CHECK(recorded.at("candidate_bundle").at("last_change") == history.back());
  CHECK(recorded.at("baseline_bundles").at("a").at("change_count") == 23'995);
  CHECK(recorded.at("candidate_bundle").at("versions").at("compiler") == "cc-k3");
  CHECK_FALSE(recorded.at("candidate_bundle").contains("changes"));
  CHECK(has(r::render_run_page(recorded, {}), fmt::format("24000 changes, the last <code>{}</code>.", history.back())));
  // A report from before, with the bundle's whole list, still shows it the same way.
  json earlier = recorded;
  earlier.at("candidate_bundle").erase("change_count");
  earlier.at("candidate_bundle").erase("last_change");
  earlier.at("candidate_bundle")["changes"] = {"k1", "k2"};
  CHECK(has(r::render_run_page(earlier, {}), "2 changes, the last <code>k2</code>."));
}

TEST_CASE("run file names: the id itself when it is safe, otherwise a safe name of its own") {
  CHECK(r::run_page_name("nightly-2026-12-03") == "nightly-2026-12-03.html");
  CHECK(r::run_json_name("smoke-c17") == "smoke-c17.json");
  for (const std::string id : {"../../etc/passwd", "index", ".hidden", "a b", "a/b", "a_b"}) {
    const std::string name = r::run_page_name(id);
    CAPTURE(name);
    CHECK(name.find('/') == std::string::npos);
    CHECK(name.front() != '.');
    CHECK(name != "index.html");
  }
  CHECK(r::run_page_name("a/b") != r::run_page_name("a_b"));
  CHECK(r::run_page_name("a/b") != r::run_page_name("a b"));
}
