// A qualification night as the coordinator stores it: a header and a record per model run
// (docs/qualification.md, "Run records"). A night of 1,000 model runs, with failures and bisection
// evidence as the demo's nightly records them, is written by the qualifier's writer to the real
// coordinator and shown whole by `kiln run ID --json`, `kiln runs` and the run's page; the writer
// puts again only the model runs that changed; and a report stored whole in one record, as
// qualifiers before wrote them, is read as before.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/bench/demo_night.h"
#include "client/client.h"
#include "records/run_records.h"
#include "client/records_client.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/support/text.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace qs = kiln::qualification::shell;
using json = nlohmann::json;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

kiln::protocol::RecordEntry stored(kiln::cli::Client& client, kiln::protocol::RecordKind kind, const std::string& key) {
  auto record = kiln::cli::expect_reply<kiln::protocol::RecordEntry>(
      client.request(kiln::protocol::GetRecord{kind, key}));
  REQUIRE_MESSAGE(record.has_value(), record.error().message);
  return *record;
}

// A coordinator alone, CI's key on it, and the demo's night to make runs of.
struct RecordsFleet {
  explicit RecordsFleet(const std::string& name) : fleet(name) {
    fleet.add_key("ci", "ci");
    fleet.start_coordinator();
    ci = fleet.client("ci", 60000);
    auto read = kiln::bench::read_demo_night(KILN_SOURCE_DIR);
    REQUIRE_MESSAGE(read.has_value(), read.error().message);
    demo = std::move(*read);
  }
  Fleet fleet;
  std::unique_ptr<kiln::cli::Client> ci;
  json demo;
};

}  // namespace

TEST_CASE("a night of 1,000 model runs is stored and shown") {
  RecordsFleet records("run-records");
  Fleet& fleet = records.fleet;
  auto& ci = records.ci;
  json night = kiln::bench::night_of(records.demo, "nightly-1000", 1000);
  // More than one record could ever hold: as one record it is refused.
  REQUIRE(night.dump().size() > kiln::protocol::kRecordDocument.max_len);

  qs::RunRecorder recorder;
  REQUIRE(recorder.record(*ci, "nightly-1000", night));
  const auto header = stored(*ci, kiln::protocol::RecordKind::qualification_run, "nightly-1000");
  CHECK(header.document.size() < 128 * 1024);  // bounded whatever the number of models
  CHECK(json::parse(header.document).at("model_runs") == 1000);

  SUBCASE("kiln run --json prints the whole report, every model run in its place") {
    std::string out, err;
    // Failed: exit 1.
    REQUIRE(fleet.kiln_split("ci", {"run", "nightly-1000", "--json"}, &out, &err, 120s) == 1);
    const json shown = json::parse(out);
    REQUIRE(shown.at("models").size() == 1000);
    CHECK(shown.at("models") == night.at("models"));
    CHECK(shown.at("verdict_counts") == night.at("verdict_counts"));
    CHECK(!shown.contains("model_runs"));
    // The summary keeps its first failures and says how many it leaves out.
    CHECK(has(shown.at("summary").get<std::string>(), "kiln nightly nightly-1000: FAILED"));
    CHECK(has(shown.at("summary").get<std::string>(), "more lines, left out of the summary for its size: `kiln run "
                                                      "nightly-1000 --json` has every model run"));
  }
  SUBCASE("kiln runs counts every model run, and the run's page lists each") {
    std::string out;
    REQUIRE(fleet.kiln("ci", {"runs"}, &out, 120s) == 0);
    CHECK(has(out, "nightly-1000"));
    CHECK(has(out, " 1000 failed"));
    const auto page = fleet.dir() / "nightly-1000.html";
    REQUIRE(fleet.kiln("ci", {"run", "nightly-1000", "--html", page.string()}, &out, 120s) == 1);
    const std::string html = read_file(page);
    CHECK(has(html, "Models (1000 model runs)"));
    for (std::size_t i = 0; i < 1000; ++i) {
      const json& model = night.at("models").at(i);
      INFO("model run ", i);
      CHECK(has(html, fmt::format("<tr><td><a href=\"#model-{}\">{}</a></td><td>{}</td>", i,
                                  model.at("model").get<std::string>(), model.at("revision").get<std::string>())));
    }
  }
  SUBCASE("recording its progress again puts only the model runs that changed") {
    const std::string unchanged_key = "nightly-1000/" + night["models"][1]["model"].get<std::string>() + "@" +
                                      night["models"][1]["revision"].get<std::string>();
    const std::string changed_key = "nightly-1000/" + night["models"][0]["model"].get<std::string>() + "@" +
                                    night["models"][0]["revision"].get<std::string>();
    const auto unchanged_before = stored(*ci, kiln::protocol::RecordKind::model_run, unchanged_key);
    std::this_thread::sleep_for(20ms);  // a rewrite would carry a later time
    night["models"][0]["detail"] = "judged again";
    REQUIRE(recorder.record(*ci, "nightly-1000", night));
    const auto unchanged_after = stored(*ci, kiln::protocol::RecordKind::model_run, unchanged_key);
    CHECK(unchanged_after.updated_at_ms == unchanged_before.updated_at_ms);
    CHECK(json::parse(stored(*ci, kiln::protocol::RecordKind::model_run, changed_key).document)
              .at("entry")
              .at("detail") == "judged again");
    auto read = qs::get_run(*ci, "nightly-1000");
    REQUIRE(read.has_value());
    CHECK(read->at("models") == night.at("models"));
  }
}

TEST_CASE("a run report stored whole in one record, as qualifiers before wrote it, is read as before") {
  RecordsFleet records("run-records-old");
  const json night = kiln::bench::night_of(records.demo, "nightly-old", 20);
  REQUIRE(kiln::cli::expect_reply<kiln::protocol::Ok>(records.ci->request(kiln::protocol::PutRecord{
      kiln::protocol::RecordKind::qualification_run, "nightly-old", night.dump()})));
  std::string out, err;
  REQUIRE(records.fleet.kiln_split("ci", {"run", "nightly-old", "--json"}, &out, &err, 60s) == 1);
  CHECK(json::parse(out) == night);
}
