// The report pages a person opens, from a real nightly: kiln-qualifier writes every run's JSON
// and page and the index into its [reports] directory, `kiln run ID --html` writes the same page,
// and headless Chromium opens them: every SVG plot is drawn with as many points as the report
// has data, and no page logs an error or asks for anything but its own file.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "tests/integration/headless_chromium.h"
#include "tests/integration/qualification_fleet.h"
#include "common/http/client.h"
#include "tests/support/text.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The qualification fleet's two one-node models and a training model (whose loss curve the
// broken gemm-bf16 of k5 pushes out of its band).
constexpr const char* kTrainingModel = R"(
[[model]]
name = "train-tiny-it"
size_class = "small"
chips = 1
minutes = 1
components = ["gemm-bf16", "gelu", "softmax", "cross-entropy", "sgd"]
owner_team = "training-models"
workload = "train-tiny"
seed = 5
)";

// Per plot (its id), how many drawn marks of each series: what the page shows, as a browser drew
// it (marks with an empty box are not counted).
constexpr const char* kDrawnMarks = R"((() => {
  const plots = {};
  for (const svg of document.querySelectorAll('svg[data-plot]')) {
    const box = svg.getBoundingClientRect();
    const series = {};
    for (const mark of svg.querySelectorAll('[data-series]')) {
      const r = mark.getBoundingClientRect();
      if (r.width > 0 && r.height > 0) series[mark.dataset.series] = (series[mark.dataset.series] || 0) + 1;
    }
    plots[svg.id] = {kind: svg.dataset.plot, drawn: box.width > 0 && box.height > 0,
                     title: svg.querySelector('title') ? svg.querySelector('title').textContent : '', series};
  }
  return plots;
})())";

std::size_t size_at(const json& object, std::initializer_list<const char*> path) {
  const json* at = &object;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &at->at(key);
  }
  return at->is_array() ? at->size() : 0;
}

// The candidate samples a report measured for a model on a revision (0: none).
std::size_t samples_of(const json& report, const std::string& model, const std::string& revision) {
  for (const json& m : report.at("models")) {
    if (m.at("model") == model && m.at("revision") == revision) {
      return size_at(m, {"performance", "initial_samples", "candidate"});
    }
  }
  return 0;
}

// What the run page of `report` must draw, from its JSON: per plot id, marks per series.
std::map<std::string, std::map<std::string, std::size_t>> expected_run_plots(const json& report,
                                                                              const std::vector<json>& earlier) {
  std::map<std::string, std::map<std::string, std::size_t>> plots;
  const json& models = report.at("models");
  for (std::size_t i = 0; i < models.size(); ++i) {
    const json& m = models[i];
    std::map<std::string, std::size_t> throughput;
    std::size_t history = 0;
    for (const json& other : earlier) history += samples_of(other, m.at("model"), m.at("revision")) > 0 ? 1 : 0;
    const std::map<std::string, std::size_t> series = {
        {"history", history},
        {"baseline", size_at(m, {"performance", "initial_samples", "baseline"})},
        {"candidate", size_at(m, {"performance", "initial_samples", "candidate"})},
        {"confirmation-baseline", size_at(m, {"performance", "confirmation_samples", "baseline"})},
        {"confirmation-candidate", size_at(m, {"performance", "confirmation_samples", "candidate"})}};
    for (const auto& [name, count] : series) {
      if (count > 0) throughput[name] = count;
    }
    if (!throughput.empty()) plots["throughput-" + std::to_string(i)] = throughput;
    if (const std::size_t points = size_at(m, {"training", "loss_curve"}); points > 0) {
      plots["loss-" + std::to_string(i)] = {{"loss", points}};
    }
    if (const std::size_t probes = size_at(m, {"bisection", "probes"}); probes > 0) {
      plots["bisection-" + std::to_string(i)] = {{"probe", probes}};
    }
  }
  return plots;
}

std::map<std::string, std::map<std::string, std::size_t>> drawn(const json& plots) {
  std::map<std::string, std::map<std::string, std::size_t>> out;
  for (const auto& [id, plot] : plots.items()) {
    CHECK_MESSAGE(plot.at("drawn") == true, id);
    CHECK_MESSAGE(!plot.at("title").get<std::string>().empty(), id);
    out[id];  // a plot with nothing drawn stays in, empty
    for (const auto& [series, count] : plot.at("series").items()) out[id][series] = count.get<std::size_t>();
  }
  return out;
}

std::string url_of(const fs::path& file) { return "file://" + fs::absolute(file).string(); }

}  // namespace

TEST_CASE("a nightly's report pages: written beside the JSON, drawn by Chromium with every point, no error logged") {
  Fleet fleet("report-pages");
  start_two_nodes(fleet, {{"model_set", "\"report-models.toml\""}});
  const fs::path dir = fleet.dir();
  const std::string set(kModelSet);
  write(dir / "report-models.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\"")) + kTrainingModel);
  REQUIRE(std::system((std::string(KILN_BIN_DIR) + "/kiln-workload-model --model train-tiny --data-seed 1 "
                       "--write-golden " + (dir / "golden").string() + " >/dev/null").c_str()) == 0);
  const std::string served = Fleet::free_loopback_address();
  std::ofstream(fleet.qualifier_config("qualifier"), std::ios::app)
      << "\n[reports]\ndirectory = \"pages\"\n\n[http]\nlisten = \"" << served << "\"\n";
  fleet.start_qualifier("qualifier");
  // Before any run the qualifier serves no index, and says why.
  REQUIRE(Fleet::eventually([&] { return kiln::http::get(served, "/metrics").status == 200; }, 10s));
  const auto no_index = kiln::http::get(served, "/");
  CHECK(no_index.status == 404);
  CHECK(contains(no_index.body, "no run has been recorded yet"));

  // Night 1 passes and becomes the baseline; night 2 has k3's slowdown and k5's broken kernel.
  std::string out;
  const std::string night1_bundle = prepare_bundles(fleet, "k2");
  REQUIRE(fleet.kiln("ci", {"nightly", "--bundle", night1_bundle, "--run-id", "nightly-1", "--wait"}, &out, 300s) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--rev", "a", "--bundle-dir", (dir / "bundles").string()}, &out) == 0);
  // The fixed rule, whose confirmation rerun the pages draw too.
  const int verdict = fleet.kiln("ci", {"nightly", "--bundle", first_word_after(out, "bundle "), "--run-id",
                                        "nightly-2", "--wait", "--perf-rule", "fixed"},
                                 &out, 300s);
  INFO(out);
  REQUIRE(verdict == 1);

  const fs::path pages = dir / "pages";
  std::map<std::string, json> reports;
  for (const char* run_id : {"nightly-1", "nightly-2"}) {
    REQUIRE(fleet.kiln("ci", {"run", run_id, "--json"}, &out) <= 1);
    reports[run_id] = json::parse(out);
    // The JSON beside the page is the report as recorded.
    CHECK(json::parse(read(pages / (std::string(run_id) + ".json"))) == reports[run_id]);
  }
  const json& night2 = reports.at("nightly-2");
  REQUIRE(night2.at("candidate_bundle").is_object());
  CHECK(contains(read(pages / "index.html"), "<a href=\"nightly-2.html\">nightly-2</a>"));
  // kiln run --html writes the page the qualifier wrote, from the coordinator's records.
  REQUIRE(fleet.kiln("ci", {"run", "nightly-2", "--html", (dir / "from-cli.html").string()}, &out) == 1);
  CHECK(contains(out, "wrote the page of run nightly-2 to " + (dir / "from-cli.html").string()));
  CHECK(read(dir / "from-cli.html") == read(pages / "nightly-2.html"));

  // The qualifier serves the same files beside its /metrics, and nothing outside their directory.
  for (const char* name : {"index.html", "nightly-2.html", "nightly-1.json"}) {
    CAPTURE(name);
    const auto page = kiln::http::get(served, std::string("/") + name);
    CHECK(page.status == 200);
    CHECK(contains(page.head, std::string(name).ends_with(".html") ? "text/html" : "application/json"));
    CHECK(page.body == read(pages / name));
  }
  CHECK(kiln::http::get(served, "/").body == read(pages / "index.html"));
  const auto missing = kiln::http::get(served, "/nightly-9.html");
  CHECK(missing.status == 404);
  CHECK(contains(missing.body, "no such run page: nightly-9.html"));
  for (const char* outside : {"/../qualifier.toml", "/..%2Fqualifier.toml", "/.hidden.html", "/pages/index.html"}) {
    CAPTURE(outside);
    CHECK(kiln::http::get(served, outside).status == 404);
  }

  // What each page must draw: per run its samples, curves and probes; the index, per model, the runs.
  std::map<std::string, std::map<std::string, std::map<std::string, std::size_t>>> expected;
  expected["nightly-1.html"] = expected_run_plots(reports.at("nightly-1"), {});
  expected["nightly-2.html"] = expected_run_plots(night2, {reports.at("nightly-1")});
  std::set<std::pair<std::string, std::string>> measured;
  for (const auto& [run_id, report] : reports) {
    for (const json& m : report.at("models")) {
      if (samples_of(report, m.at("model"), m.at("revision")) > 0) measured.insert({m.at("model").get<std::string>(), m.at("revision").get<std::string>()});
    }
  }
  std::size_t k = 0;
  for (const auto& [model, revision] : measured) {
    std::size_t runs = 0;
    for (const auto& [run_id, report] : reports) runs += samples_of(report, model, revision) > 0 ? 1 : 0;
    expected["index.html"]["history-" + std::to_string(k++)] = {{"history", runs}};
  }
  // The nightly drew every kind of plot: history with samples and a rerun, a loss curve, probes.
  const auto& night2_plots = expected.at("nightly-2.html");
  CHECK(std::any_of(night2_plots.begin(), night2_plots.end(),
                    [](const auto& p) { return p.second.count("history") && p.second.count("confirmation-candidate"); }));
  CHECK(std::any_of(night2_plots.begin(), night2_plots.end(), [](const auto& p) { return p.second.count("loss"); }));
  CHECK(std::any_of(night2_plots.begin(), night2_plots.end(), [](const auto& p) { return p.second.count("probe"); }));

  const auto program = HeadlessChromium::find();
  if (!program) {
    MESSAGE("skipped opening the pages in a browser: chromium is not installed (scripts/setup installs it)");
    return;
  }
  HeadlessChromium browser(*program, dir / "chromium-profile");
  REQUIRE_MESSAGE(browser.started(), browser.failure());
  for (const auto& [file, plots] : expected) {
    CAPTURE(file);
    const auto page = browser.open(url_of(pages / file), kDrawnMarks);
    REQUIRE_MESSAGE(page.has_value(), browser.failure());
    CHECK(drawn(page->value) == plots);
    CHECK(page->errors == std::vector<std::string>{});
    for (const auto& url : page->requests) CHECK_MESSAGE(url.rfind("file://", 0) == 0, url);
  }

  // The checks catch what they look for: a page that logs errors and asks the network...
  write(dir / "scratch-errors.html",
        "<!DOCTYPE html><title>scratch</title><script>console.error('injected error')</script>"
        "<img alt='' src='http://127.0.0.1:1/missing.png'><script>throw new Error('injected exception')</script>");
  const auto scratch = browser.open(url_of(dir / "scratch-errors.html"), "1");
  REQUIRE_MESSAGE(scratch.has_value(), browser.failure());
  const std::string said = json(scratch->errors).dump();
  CHECK(contains(said, "injected error"));
  CHECK(contains(said, "injected exception"));
  CHECK(std::any_of(scratch->requests.begin(), scratch->requests.end(),
                    [](const std::string& url) { return url.rfind("http://", 0) == 0; }));
  // ...and a script injected into a report page neither runs (its security policy) nor goes unseen.
  std::string injected = read(pages / "nightly-2.html");
  injected.insert(injected.find("<body>") + 6, "<script>document.title = 'injected'</script>");
  write(dir / "scratch-injected.html", injected);
  const auto blocked = browser.open(url_of(dir / "scratch-injected.html"), "document.title");
  REQUIRE_MESSAGE(blocked.has_value(), browser.failure());
  CHECK(blocked->value == "kiln nightly nightly-2: failed");
  CHECK(contains(json(blocked->errors).dump(), "Content Security Policy"));
}
