// A run report as a header and a record per model run (run_records.h): split and put back together
// it is the report; a report is bounded in its header whatever its size.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "common/protocol/messages_records.h"
#include "records/run_records.h"

using json = nlohmann::json;
namespace q = kiln::qualification;

namespace {

json report(const std::string& run_id, int models, const std::string& summary = "kiln nightly: FAILED\n") {
  json document = {{"schema", "kiln.qualification-run/1"}, {"run_id", run_id}, {"finished", true},
                   {"summary", summary}, {"tickets", json::array()}, {"models", json::array()}};
  for (int i = 0; i < models; ++i) {
    document["models"].push_back({{"model", "mlp-fp8-small-" + std::to_string(i)},
                                  {"revision", i % 2 ? "a" : "b"},
                                  {"verdict", "performance_regression"},
                                  {"detail", "throughput -3.1%"}});
  }
  return document;
}

std::vector<json> documents_of(const q::RunRecords& records) {
  std::vector<json> documents;
  for (const auto& model : records.models) documents.push_back(model.document);
  return documents;
}

}  // namespace

TEST_CASE("a run split into its header and model runs is put back together as the report") {
  const json night = report("nightly-7", 5);
  auto records = q::split_run(night);
  REQUIRE(records.has_value());
  CHECK(!records->header.contains("models"));
  CHECK(records->header.at("model_runs") == 5);
  CHECK(q::models_stored_apart(records->header));
  CHECK_FALSE(q::models_stored_apart(night));  // a report stored whole is read as it is
  REQUIRE(records->models.size() == 5);
  CHECK(records->models[3].key == "nightly-7/mlp-fp8-small-3@a");
  CHECK(records->models[3].key.starts_with(q::model_run_prefix("nightly-7")));
  // Listed in another order (a model run rewritten later), with another run's model runs under a
  // longer run id that shares the prefix: the report as it was.
  auto documents = documents_of(*records);
  std::swap(documents[0], documents[4]);
  documents.push_back(q::split_run(report("nightly-7/x", 1))->models[0].document);
  auto whole = q::assemble_run(records->header, documents);
  REQUIRE(whole.has_value());
  CHECK(*whole == night);
}

TEST_CASE("a model run missing from the store is an error naming the run, not a shorter report") {
  auto records = q::split_run(report("nightly-7", 3));
  auto documents = documents_of(*records);
  documents.erase(documents.begin() + 1);
  auto whole = q::assemble_run(records->header, documents);
  REQUIRE_FALSE(whole.has_value());
  CHECK(whole.error().message.find("run nightly-7 counts 3 model runs but model run 1 is not recorded") !=
        std::string::npos);
}

TEST_CASE("a model run whose key would be too long is keyed by its position; a run id too long is stored whole") {
  const std::string long_id(115, 'r');
  auto records = q::split_run(report(long_id, 2));
  REQUIRE(records.has_value());
  CHECK(records->models[1].key == long_id + "/#1");
  CHECK(records->models[1].key.size() <= kiln::protocol::kRecordKey.max_len);
  CHECK_FALSE(q::split_run(report(std::string(127, 'r'), 2)).has_value());
}

TEST_CASE("the header keeps the summary's first lines within its bound and says how many it left out") {
  std::string summary = "kiln nightly nightly-9: FAILED\n";
  for (int i = 0; i < 1000; ++i) summary += "  FAIL mlp-fp8-small-" + std::to_string(i) + ": " + std::string(600, 'x') + "\n";
  auto records = q::split_run(report("nightly-9", 1, summary));
  const std::string kept = records->header.at("summary").get<std::string>();
  CHECK(kept.size() <= q::kHeaderSummaryBytes);
  CHECK(kept.starts_with("kiln nightly nightly-9: FAILED\n  FAIL mlp-fp8-small-0: "));
  const auto lines_kept = std::count(kept.begin(), kept.end(), '\n') - 1;  // without the note
  CHECK(kept.ends_with("  ... and " + std::to_string(1001 - lines_kept) +
                       " more lines, left out of the summary for its size: `kiln run nightly-9 --json` has every model "
                       "run\n"));
  // A summary within the bound is kept whole.
  CHECK(q::split_run(report("nightly-9", 1))->header.at("summary") == "kiln nightly: FAILED\n");
}

TEST_CASE("a model run listed again (a release's soak round) has a record of its own") {
  json release = report("release-1", 2);
  release["models"].push_back(release["models"][0]);
  release["models"].back()["verdict"] = "pass";
  auto records = q::split_run(release);
  REQUIRE(records.has_value());
  REQUIRE(records->models.size() == 3);
  CHECK(records->models[0].key == "release-1/mlp-fp8-small-0@b");
  CHECK(records->models[2].key == "release-1/mlp-fp8-small-0@b#2");
  auto whole = q::assemble_run(records->header, documents_of(*records));
  REQUIRE(whole.has_value());
  CHECK(*whole == release);
}

TEST_CASE("a model run of a later write than its header says the header was read in the middle of a write") {
  auto records = q::split_run(report("nightly-8", 2));
  REQUIRE(records.has_value());
  auto documents = documents_of(*records);
  CHECK_FALSE(q::written_after(records->header, documents));  // records put before writes were numbered
  records->header[q::kWriteMember] = 41;
  documents[0][q::kWriteMember] = 41;
  CHECK_FALSE(q::written_after(records->header, documents));
  documents[1][q::kWriteMember] = 42;
  CHECK(q::written_after(records->header, documents));
  records->header[q::kWriteMember] = 42;
  CHECK_FALSE(q::written_after(records->header, documents));
  auto whole = q::assemble_run(records->header, documents);
  REQUIRE(whole.has_value());
  CHECK_FALSE(whole->contains(q::kWriteMember));
  CHECK(whole->at("models").size() == 2);
}
