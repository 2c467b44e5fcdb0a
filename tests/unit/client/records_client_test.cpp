// The records client reads what it needs, not the whole history: the change history in the order
// the changes were recorded (by the qualifier's ChangeHistory, only what was recorded since), a
// promotion's runs from its bundle's record on, and a bundle named by a prefix of its id.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "records/change.h"
#include "client/records_client.h"

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
namespace protocol = kiln::protocol;

namespace {

// Holds records as the coordinator's store does (one seq over every kind, in the order they were
// first written), answers get_record and pages list_records as §13 says; counts the records it
// sends.
class Records final : public kiln::cli::Client {
 public:
  void record(protocol::RecordKind kind, const std::string& key, const std::string& document) {
    records_.push_back({kind, key, document, ++last_seq_, 0, "ci"});
  }
  void record(const q::Change& change) { record(protocol::RecordKind::change, change.id, q::to_json(change).dump()); }

  kiln::Result<protocol::Body> request(protocol::Body body) override {
    if (before_request) before_request(body);
    if (const auto* put = std::get_if<protocol::PutRecord>(&body)) {
      // As the store does: a record put again takes the next seq.
      std::erase_if(records_, [&](const protocol::RecordEntry& r) { return r.kind == put->kind && r.key == put->key; });
      records_.push_back({put->kind, put->key, put->document, ++last_seq_, 0, "ci"});
      return protocol::Ok{};
    }
    if (const auto* get = std::get_if<protocol::GetRecord>(&body)) {
      for (const auto& record : records_) {
        if (record.kind == get->kind && record.key == get->key) {
          ++sent;
          return record;
        }
      }
      return tl::unexpected(kiln::Error{kiln::Errc::not_found, "no such record"});
    }
    const auto* list = std::get_if<protocol::ListRecords>(&body);
    REQUIRE(list != nullptr);
    std::vector<protocol::RecordEntry> in_range;
    for (const auto& record : records_) {
      if (record.kind == list->kind && record.seq > list->after_seq &&
          (list->before_seq == 0 || record.seq < list->before_seq) && record.key.starts_with(list->key_prefix)) {
        in_range.push_back(record);
      }
    }
    if (list->newest_first) std::reverse(in_range.begin(), in_range.end());
    protocol::RecordList page;
    for (auto& record : in_range) {
      if (page.records.size() == std::min<std::size_t>(kPageRecords, list->limit)) {
        page.more = true;
        break;
      }
      page.records.push_back(std::move(record));
    }
    sent += page.records.size();
    return page;
  }

  static constexpr std::size_t kPageRecords = 100;
  std::size_t sent = 0;
  // Called with each request before it is answered: another client's requests go in between.
  std::function<void(const protocol::Body&)> before_request;

 private:
  std::vector<protocol::RecordEntry> records_;
  std::uint64_t last_seq_ = 0;
};

// A writer's connection that stops before the header: the model runs of its write are put, the
// header is not yet.
class UpToTheHeader final : public kiln::cli::Client {
 public:
  explicit UpToTheHeader(kiln::cli::Client& store) : store_(store) {}
  kiln::Result<protocol::Body> request(protocol::Body body) override {
    const auto* put = std::get_if<protocol::PutRecord>(&body);
    if (put != nullptr && put->kind == protocol::RecordKind::qualification_run) {
      return tl::unexpected(kiln::Error{kiln::Errc::unavailable, "not yet"});
    }
    return store_.request(std::move(body));
  }

 private:
  kiln::cli::Client& store_;
};

q::Change change(int index, kiln::TimeMs merged_at_ms) {
  return {fmt::format("c{:05}", index), q::Layer::kernels, "kernels-team", {"gemm-bf16"}, merged_at_ms, "", std::nullopt};
}

std::vector<std::string> ids(const std::vector<q::Change>& changes) {
  std::vector<std::string> out;
  for (const auto& c : changes) out.push_back(c.id);
  return out;
}

}  // namespace

TEST_CASE("the change history is the order changes were recorded, whatever their merge times") {
  Records coordinator;
  coordinator.record(change(1, 2000));
  coordinator.record(change(2, 3000));
  coordinator.record(change(3, 1000));  // recorded late, merged earlier: it still comes last
  auto history = qs::list_changes(coordinator);
  REQUIRE(history.has_value());
  CHECK(ids(*history) == std::vector<std::string>{"c00001", "c00002", "c00003"});
}

TEST_CASE("the qualifier's change history reads only the changes recorded since its last read") {
  Records coordinator;
  for (int i = 0; i < 1000; ++i) coordinator.record(change(i, 1000 + i));
  qs::ChangeHistory history;
  auto first = history.read(coordinator);
  REQUIRE(first.has_value());
  CHECK(first->size() == 1000);
  CHECK(coordinator.sent == 1000);

  // Each later read, as each run makes one, costs the changes recorded since: none, then two.
  auto again = history.read(coordinator);
  REQUIRE(again.has_value());
  CHECK(coordinator.sent == 1000);
  coordinator.record(change(1000, 1));
  coordinator.record(change(1001, 2));
  auto grown = history.read(coordinator);
  REQUIRE(grown.has_value());
  CHECK(coordinator.sent == 1002);
  auto whole = qs::list_changes(coordinator);
  REQUIRE(whole.has_value());
  CHECK(ids(*grown) == ids(*whole));
  CHECK(grown->back().id == "c01001");
}

TEST_CASE("a promotion reads the reports recorded since its bundle, and finds each of its runs") {
  Records coordinator;
  const auto report = [](const std::string& run_id, const std::string& bundle_id) {
    return nlohmann::json{{"run_id", run_id}, {"candidate_bundle_id", bundle_id}}.dump();
  };
  for (int i = 0; i < 500; ++i) {
    coordinator.record(protocol::RecordKind::qualification_run, fmt::format("old-{}", i), report("old", "0ld"));
  }
  coordinator.record(protocol::RecordKind::bundle, "b1", "{}");
  coordinator.record(protocol::RecordKind::qualification_run, "smoke-b1", report("smoke-b1", "b1"));
  coordinator.record(protocol::RecordKind::qualification_run, "smoke-other", report("smoke-other", "b2"));
  coordinator.record(protocol::RecordKind::qualification_run, "nightly-b1", report("nightly-b1", "b1"));
  coordinator.sent = 0;
  auto runs = qs::list_runs_of_bundle(coordinator, "b1");
  REQUIRE(runs.has_value());
  REQUIRE(runs->size() == 2);
  CHECK(runs->at(0).at("run_id") == "smoke-b1");
  CHECK(runs->at(1).at("run_id") == "nightly-b1");
  CHECK(coordinator.sent == 1 + 3);  // the bundle's record, then the three reports after it
  CHECK(qs::list_runs_of_bundle(coordinator, "b9").error().code == kiln::Errc::not_found);
}

TEST_CASE("a bundle named by a prefix of its id is read alone, not with every bundle") {
  Records coordinator;
  std::vector<q::Change> history;
  for (int i = 0; i < 300; ++i) history.push_back(change(i, 1000 + i));
  std::vector<q::Bundle> bundles;
  for (std::size_t i = 0; i < history.size(); ++i) {
    auto bundle = q::build_bundle_at(history, i);
    REQUIRE(bundle.has_value());
    coordinator.record(protocol::RecordKind::bundle, bundle->id, q::to_json(*bundle).dump());
    bundles.push_back(std::move(*bundle));
  }
  const q::Bundle& wanted = bundles[123];
  // The shortest prefix that no other bundle's id starts with, at least 6 characters.
  std::size_t unique = 6;
  while (std::any_of(bundles.begin(), bundles.end(), [&](const q::Bundle& b) {
    return b.id != wanted.id && b.id.starts_with(wanted.id.substr(0, unique));
  })) {
    ++unique;
  }
  coordinator.sent = 0;
  auto found = qs::find_bundle(coordinator, wanted.id.substr(0, unique));
  REQUIRE_MESSAGE(found.has_value(), found.error().message);
  CHECK(found->id == wanted.id);
  CHECK(coordinator.sent == 1);

  // Two bundles share a prefix: both are named, and no more than those two is read.
  const std::string ambiguous = "abcdef";
  for (const char* tail : {"-one", "-two", "-three"}) coordinator.record(protocol::RecordKind::bundle, ambiguous + tail, "{}");
  coordinator.sent = 0;
  auto two = qs::find_bundle(coordinator, ambiguous);
  REQUIRE_FALSE(two.has_value());
  CHECK(two.error().code == kiln::Errc::invalid_argument);
  CHECK(two.error().message.find(ambiguous + "-one") != std::string::npos);
  CHECK(two.error().message.find("give more of the id") != std::string::npos);
  CHECK(coordinator.sent == 2);

  coordinator.sent = 0;
  auto none = qs::find_bundle(coordinator, "zzzzzz");
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().code == kiln::Errc::not_found);
  CHECK(coordinator.sent == 0);
}

TEST_CASE("a run read while its writer is between its model runs and its header is read whole, as one write") {
  Records coordinator;
  qs::RunRecorder writer;
  const auto night = [](const std::string& verdict, const std::string& summary) {
    nlohmann::json report = {{"schema", "kiln.qualification-run/1"}, {"run_id", "nightly-9"}, {"summary", summary},
                             {"models", nlohmann::json::array()}};
    for (const char* model : {"llama-8b", "resnet-50", "bert-large"}) {
      report["models"].push_back({{"model", model}, {"revision", "b0"}, {"verdict", verdict}});
    }
    report["models"][1]["verdict"] = "passed";
    return report;
  };
  REQUIRE(writer.record(coordinator, "nightly-9", night("running", "kiln nightly: running\n")));
  const nlohmann::json failed = night("correctness_regression", "kiln nightly: FAILED\n");

  // The reader lists the model runs just after the writer put those of its next write; the writer
  // puts that write's header only after the reader has read the header twice more.
  int header_reads_after = -1;
  coordinator.before_request = [&](const protocol::Body& body) {
    const auto* list = std::get_if<protocol::ListRecords>(&body);
    if (list != nullptr && list->kind == protocol::RecordKind::model_run && header_reads_after < 0) {
      header_reads_after = 0;
      UpToTheHeader stopped(coordinator);
      CHECK_FALSE(writer.record(stopped, "nightly-9", failed));
      return;
    }
    if (std::holds_alternative<protocol::GetRecord>(body) && header_reads_after >= 0 && ++header_reads_after == 2) {
      REQUIRE(writer.record(coordinator, "nightly-9", failed));
    }
  };
  auto read = qs::get_run(coordinator, "nightly-9");
  REQUIRE_MESSAGE(read.has_value(), read.error().message);
  CHECK(read->at("summary") == "kiln nightly: FAILED\n");
  CHECK(read->at("models").at(0).at("verdict") == "correctness_regression");
  CHECK(read->at("models").at(1).at("verdict") == "passed");
  CHECK_FALSE(read->contains("write"));
}
