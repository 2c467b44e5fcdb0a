// Ticket records: one per culprit however often it is filed, people's states, and deliveries
// retried with a bounded backoff until the sink takes them.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "records/ticket_record.h"

namespace q = kiln::qualification;
using kiln::Errc;
using kiln::fail;
using kiln::Status;

namespace {

q::Ticket c07_ticket(kiln::TimeMs at_ms = 5000) {
  const q::Change c07{"c07", q::Layer::compiler, "compiler-team", {"gemm-bf16"}, 1000, "fuse", std::nullopt};
  return q::make_culprit_ticket(c07, q::TicketKind::performance_regression, "mlp-bf16: throughput -8%",
                                R"({"run_id": "nightly-1"})", at_ms);
}

}  // namespace

TEST_CASE("a ticket record keeps its run, state and deliveries through JSON") {
  q::TicketRecord record = q::new_ticket_record(c07_ticket(), "nightly-1", {"webhook"});
  CHECK(record.state == q::TicketState::open);
  CHECK_FALSE(record.sinks.at("webhook").delivered);
  record.sinks["webhook"] = q::after_attempt(record.sinks["webhook"], fail(Errc::unavailable, "HTTP 503"), 100, {});
  const auto back = q::ticket_record_from_json(q::to_json(record));
  REQUIRE_MESSAGE(back.has_value(), back.error().message);
  CHECK(back->ticket.id == record.ticket.id);
  CHECK(back->run_id == "nightly-1");
  CHECK(back->sinks.at("webhook").attempts == 1);
  CHECK(back->sinks.at("webhook").last_error == "HTTP 503");
  CHECK(q::to_json(*back) == q::to_json(record));
}

TEST_CASE("a ticket record is refused without its run or with an id that is not its culprit's") {
  nlohmann::json document = q::to_json(q::new_ticket_record(c07_ticket(), "nightly-1", {}));
  document["run_id"] = "";
  CHECK(q::ticket_record_from_json(document).error().message.find("run_id") != std::string::npos);
  document["run_id"] = "nightly-1";
  document["id"] = "kiln-0000000000000000";
  CHECK(q::ticket_record_from_json(document).error().code == Errc::invalid_argument);
  document["id"] = c07_ticket().id;
  document["state"] = "closed";
  CHECK(q::ticket_record_from_json(document).error().message.find("acknowledged") != std::string::npos);
}

TEST_CASE("filing a culprit again keeps the first filing, its state and the deliveries already made") {
  q::TicketRecord held = q::new_ticket_record(c07_ticket(5000), "nightly-1", {"webhook"});
  held = *q::with_state(held, q::TicketState::acknowledged, "", false, "alice", 6000);
  held.sinks["webhook"] = q::after_attempt(held.sinks["webhook"], {}, 5500, {});

  // A second run, or a second qualifier, files the same culprit: its own run, state and
  // undelivered webhook change nothing held.
  const q::TicketRecord again = q::new_ticket_record(c07_ticket(9000), "nightly-2", {"webhook", "directory"});
  const q::TicketRecord merged = q::merge_filing(held, again);
  CHECK(merged.run_id == "nightly-1");
  CHECK(merged.ticket.created_at_ms == 5000);
  CHECK(merged.state == q::TicketState::acknowledged);
  CHECK(merged.sinks.at("webhook").delivered);
  CHECK(merged.sinks.count("directory") == 1);

  // A qualifier's later attempt on an undelivered sink is taken.
  q::TicketRecord retried = merged;
  retried.sinks["directory"] = q::after_attempt(retried.sinks["directory"], fail(Errc::io, "disk full"), 7000, {});
  CHECK(q::merge_filing(merged, retried).sinks.at("directory").attempts == 1);
}

TEST_CASE("people set a ticket's state; a duplicate names another recorded ticket") {
  const q::TicketRecord record = q::new_ticket_record(c07_ticket(), "nightly-1", {});
  auto fixed = q::with_state(record, q::TicketState::fixed, "", false, "bob", 10);
  REQUIRE(fixed.has_value());
  CHECK(fixed->state == q::TicketState::fixed);
  CHECK(fixed->state_set_by == "bob");
  CHECK(fixed->state_set_at_ms == 10);

  CHECK(q::with_state(record, q::TicketState::duplicate, "", false, "bob", 10).error().message.find("--of") !=
        std::string::npos);
  CHECK(q::with_state(record, q::TicketState::duplicate, record.ticket.id, true, "bob", 10).error().code ==
        Errc::invalid_argument);
  CHECK(q::with_state(record, q::TicketState::duplicate, "kiln-1111111111111111", false, "bob", 10).error().code ==
        Errc::not_found);
  auto duplicate = q::with_state(record, q::TicketState::duplicate, "kiln-1111111111111111", true, "bob", 10);
  REQUIRE(duplicate.has_value());
  CHECK(duplicate->duplicate_of == "kiln-1111111111111111");
  CHECK(q::with_state(record, q::TicketState::open, "kiln-1111111111111111", true, "bob", 10).error().code ==
        Errc::invalid_argument);
  // Open again: no longer a duplicate of anything.
  CHECK(q::with_state(*duplicate, q::TicketState::open, "", false, "bob", 11)->duplicate_of.empty());
}

TEST_CASE("a sink that is down is retried with a doubling backoff that stops at its cap, until it takes the ticket") {
  const q::DeliveryPolicy policy{1000, 5000};
  q::TicketRecord record = q::new_ticket_record(c07_ticket(), "nightly-1", {"webhook"});
  const Status down = fail(Errc::unavailable, "connection refused");

  CHECK(q::deliveries_due({record}, {"webhook"}, 0).size() == 1);
  // A sink this qualifier does not have is left to the one that has it.
  CHECK(q::deliveries_due({record}, {"directory"}, 0).empty());

  kiln::TimeMs now = 0;
  std::vector<kiln::DurationMs> waits;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto& delivery = record.sinks["webhook"];
    delivery = q::after_attempt(delivery, down, now, policy);
    waits.push_back(delivery.next_attempt_at_ms - now);
    CHECK(q::deliveries_due({record}, {"webhook"}, delivery.next_attempt_at_ms - 1).empty());
    now = delivery.next_attempt_at_ms;
    CHECK(q::deliveries_due({record}, {"webhook"}, now).size() == 1);
  }
  CHECK(waits == std::vector<kiln::DurationMs>{1000, 2000, 4000, 5000, 5000});

  record.sinks["webhook"] = q::after_attempt(record.sinks["webhook"], {}, now, policy);
  CHECK(record.sinks["webhook"].delivered);
  CHECK(record.sinks["webhook"].attempts == 6);
  CHECK(record.sinks["webhook"].last_error.empty());
  CHECK(q::deliveries_due({record}, {"webhook"}, now + 1000000).empty());
}
