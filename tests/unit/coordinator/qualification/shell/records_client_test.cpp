// The records client's change history: read in the order the changes were recorded, and by the
// qualifier's ChangeHistory a page of what was recorded since, not the whole history per run.
#include <doctest/doctest.h>

#include <algorithm>

#include <fmt/format.h>

#include "coordinator/qualification/change.h"
#include "coordinator/qualification/shell/records_client.h"

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
namespace protocol = kiln::protocol;

namespace {

// Holds change records as the coordinator's store does (seq in the order they were recorded)
// and pages list_records as §13 says; counts the records it sends.
class ChangeRecords final : public kiln::cli::Client {
 public:
  void record(const q::Change& change) {
    records_.push_back({protocol::RecordKind::change, change.id, q::to_json(change).dump(), records_.size() + 1, 0, "ci"});
  }

  kiln::Result<protocol::Body> request(protocol::Body body) override {
    const auto* list = std::get_if<protocol::ListRecords>(&body);
    REQUIRE(list != nullptr);
    REQUIRE(list->kind == protocol::RecordKind::change);
    REQUIRE_FALSE(list->newest_first);
    protocol::RecordList page;
    for (const auto& record : records_) {
      if (record.seq <= list->after_seq) continue;
      if (page.records.size() == kPageRecords) {
        page.more = true;
        break;
      }
      page.records.push_back(record);
    }
    sent += page.records.size();
    return page;
  }

  static constexpr std::size_t kPageRecords = 100;
  std::size_t sent = 0;

 private:
  std::vector<protocol::RecordEntry> records_;
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
  ChangeRecords coordinator;
  coordinator.record(change(1, 2000));
  coordinator.record(change(2, 3000));
  coordinator.record(change(3, 1000));  // recorded late, merged earlier: it still comes last
  auto history = qs::list_changes(coordinator);
  REQUIRE(history.has_value());
  CHECK(ids(*history) == std::vector<std::string>{"c00001", "c00002", "c00003"});
}

TEST_CASE("the qualifier's change history reads only the changes recorded since its last read") {
  ChangeRecords coordinator;
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
