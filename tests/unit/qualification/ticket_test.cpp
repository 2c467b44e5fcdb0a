#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qualification/ticket.h"
#include "tests/support/temp_dir.h"

namespace q = kiln::qualification;
namespace fs = std::filesystem;

namespace {

using kiln::testing::TempDir;

q::Change culprit() {
  return {"c0412", q::Layer::kernels, "kernels-team", {"gemm-bf16"}, 1000, "retile gemm", std::nullopt};
}

}  // namespace

TEST_CASE("a culprit ticket goes to the change's owner with an id from the culprit and kind") {
  const q::Ticket ticket = q::make_culprit_ticket(culprit(), q::TicketKind::correctness_regression,
                                                  "gemm-bf16 numerics broken", R"({"models": ["mlp-bf16-small-01"]})",
                                                  5000);
  CHECK(ticket.team == "kernels-team");
  CHECK(ticket.layer == q::Layer::kernels);
  CHECK(ticket.culprit_change == "c0412");
  CHECK(ticket.id.starts_with("kiln-"));
  CHECK(ticket.id.size() == 21);
  CHECK(q::dedupe_key(ticket) == "correctness_regression:c0412");
  CHECK(q::make_ticket(q::TicketKind::correctness_regression, "x", "y", "c0412", std::nullopt, "{}", 9).id == ticket.id);
  CHECK(q::make_ticket(q::TicketKind::performance_regression, "x", "y", "c0412", std::nullopt, "{}", 9).id != ticket.id);

  auto back = q::ticket_from_json_text(q::to_json_text(ticket), "t.json");
  REQUIRE(back.has_value());
  CHECK(back->id == ticket.id);
  CHECK(back->layer == q::Layer::kernels);
  CHECK(nlohmann::json::parse(back->evidence_json) == nlohmann::json::parse(ticket.evidence_json));
}

TEST_CASE("the directory sink writes one JSON file per ticket and never files the same culprit twice") {
  TempDir dir;
  auto sink = q::DirectoryTicketSink::open(dir / "tickets");
  REQUIRE(sink.has_value());
  const q::Ticket ticket = q::make_culprit_ticket(culprit(), q::TicketKind::performance_regression,
                                                  "mlp-bf16 3% slower", R"({"shift": -0.03})", 1000);
  CHECK(sink->file(ticket) == q::FileResult::filed);
  // The same culprit and kind again, even with another title and time: a duplicate.
  q::Ticket again = ticket;
  again.title = "mlp-bf16 slower again";
  again.created_at_ms = 2000;
  CHECK(sink->file(again) == q::FileResult::duplicate);
  // Another sink on the same directory (a restarted coordinator) knows it too.
  auto reopened = q::DirectoryTicketSink::open(dir / "tickets");
  CHECK(reopened->file(ticket) == q::FileResult::duplicate);
  // Another kind for the same change is another ticket.
  const q::Ticket numerics = q::make_culprit_ticket(culprit(), q::TicketKind::correctness_regression,
                                                    "numerics", "{}", 3000);
  CHECK(sink->file(numerics) == q::FileResult::filed);

  auto listed = sink->list();
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 2);
  CHECK((*listed)[0].title == "mlp-bf16 3% slower");
  CHECK((*listed)[1].kind == q::TicketKind::correctness_regression);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir / "tickets")) {
    ++files;
    CHECK(entry.path().extension() == ".json");  // no temporary file left behind
    std::ifstream in(entry.path());
    std::ostringstream text;
    text << in.rdbuf();
    CHECK(nlohmann::json::parse(text.str())["schema"] == "kiln.ticket/1");
  }
  CHECK(files == 2);
}

TEST_CASE("sinks refuse an incomplete ticket or evidence that is not a JSON object") {
  TempDir dir;
  auto sink = q::DirectoryTicketSink::open(dir.path());
  REQUIRE(sink.has_value());
  q::Ticket ticket = q::make_culprit_ticket(culprit(), q::TicketKind::performance_regression, "t", "[1, 2]", 0);
  CHECK(sink->file(ticket).error().code == kiln::Errc::bad_message);
  ticket.evidence_json = "{}";
  ticket.team.clear();
  CHECK(sink->file(ticket).error().code == kiln::Errc::invalid_argument);
  q::MemoryTicketSink memory;
  CHECK_FALSE(memory.file(ticket).has_value());
  CHECK(q::DirectoryTicketSink::open("/proc/kiln-no-such/tickets").error().code == kiln::Errc::io);
}

TEST_CASE("the memory sink dedupes like the directory sink") {
  q::MemoryTicketSink sink;
  const q::Ticket node = q::make_ticket(q::TicketKind::hardware_suspect, "lab", "n07 suspect", "node:n07",
                                        std::nullopt, R"({"test": "mlp-bf16-small-03"})", 0);
  CHECK(sink.file(node) == q::FileResult::filed);
  CHECK(sink.file(node) == q::FileResult::duplicate);
  CHECK(sink.tickets().size() == 1);
}

TEST_CASE("the webhook sink is configuration plus the body to POST") {
  q::WebhookSinkConfig config;
  config.url = "https://tickets.example.com/hooks/kiln";
  CHECK(q::validate(config).has_value());
  config.url = "ftp://tickets.example.com";
  CHECK(q::validate(config).error().code == kiln::Errc::config);
  config.url = "https:///path";
  CHECK_FALSE(q::validate(config).has_value());
  config.url = "http://localhost:8080/";
  config.max_attempts = 0;
  CHECK_FALSE(q::validate(config).has_value());

  const q::Ticket ticket = q::make_culprit_ticket(culprit(), q::TicketKind::performance_regression, "slower",
                                                  R"({"p": 0.001})", 42);
  const nlohmann::json body = nlohmann::json::parse(q::webhook_body(ticket));
  CHECK(body["dedupe_key"] == "performance_regression:c0412");
  CHECK(body["team"] == "kernels-team");
  CHECK(body["evidence"]["p"] == 0.001);
}
