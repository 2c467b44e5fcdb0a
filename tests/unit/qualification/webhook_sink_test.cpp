// The webhook ticket sink against a loopback HTTP server run by the test.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "qualification/webhook_sink.h"
#include "tests/support/loopback_http.h"
#include "tests/support/temp_dir.h"

namespace q = kiln::qualification;
namespace fs = std::filesystem;

namespace {

using kiln::testing::LoopbackServer;
using kiln::testing::TempDir;

q::Ticket culprit_ticket(const std::string& change = "chg-0042") {
  return q::make_ticket(q::TicketKind::performance_regression, "compiler-team", "mlp-bf16 is 3% slower", change,
                        q::Layer::compiler, R"({"shift": -0.031, "p_value": 0.0004})", 1796013552000);
}

std::string write_token(const TempDir& dir, const std::string& token, mode_t mode) {
  const fs::path path = dir.path() / "token";
  std::ofstream(path, std::ios::trunc) << token << "\n";
  REQUIRE(::chmod(path.c_str(), mode) == 0);
  return path.string();
}

struct Waits {
  std::vector<kiln::DurationMs> ms;
  q::SleepFunction function() {
    return [this](kiln::DurationMs wait) { ms.push_back(wait); };
  }
};

}  // namespace

TEST_CASE("a ticket is POSTed as JSON with the configured headers and the bearer token") {
  TempDir dir;
  LoopbackServer server({201});
  q::WebhookSinkConfig config;
  config.url = server.url("/hooks/kiln?source=ci");
  config.headers = {{"X-Kiln-Site", "lab-3"}};
  config.bearer_token_file = write_token(dir, "s3cret-token", 0600);
  auto sink = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE_MESSAGE(sink.has_value(), sink.error().message);

  const auto ticket = culprit_ticket();
  auto filed = sink->file(ticket);
  REQUIRE_MESSAGE(filed.has_value(), filed.error().message);
  CHECK(*filed == q::FileResult::filed);

  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  const auto& head = requests[0].head;
  CHECK(head.starts_with("POST /hooks/kiln?source=ci HTTP/1.1\r\n"));
  CHECK(head.find("Host: 127.0.0.1:") != std::string::npos);
  CHECK(head.find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(head.find("Authorization: Bearer s3cret-token\r\n") != std::string::npos);
  CHECK(head.find("X-Kiln-Site: lab-3\r\n") != std::string::npos);
  CHECK(requests[0].body == q::webhook_body(ticket));
  const auto body = nlohmann::json::parse(requests[0].body);
  CHECK(body["culprit"] == "chg-0042");
  CHECK(body["team"] == "compiler-team");
  CHECK(body["dedupe_key"] == q::dedupe_key(ticket));
  // The record holds what was sent.
  CHECK(fs::exists(sink->record().path_for(ticket)));
}

TEST_CASE("a second file of the same culprit sends nothing; another culprit is sent") {
  TempDir dir;
  LoopbackServer server({200});
  q::WebhookSinkConfig config;
  config.url = server.url();
  auto sink = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE(sink.has_value());
  REQUIRE(sink->file(culprit_ticket()).value() == q::FileResult::filed);

  auto again = culprit_ticket();
  again.title = "mlp-bf16 is 3% slower (rerun)";
  CHECK(sink->file(again).value() == q::FileResult::duplicate);
  CHECK(server.connections() == 1);

  // A restarted coordinator with the same record directory knows it too.
  auto restarted = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE(restarted.has_value());
  CHECK(restarted->file(culprit_ticket()).value() == q::FileResult::duplicate);
  CHECK(server.connections() == 1);

  CHECK(sink->file(culprit_ticket("chg-0043")).value() == q::FileResult::filed);
  CHECK(server.connections() == 2);
}

TEST_CASE("a 500 is retried after the backoff, doubling; a 409 means the receiver has it") {
  TempDir dir;
  SUBCASE("500 then 200") {
    LoopbackServer server({500, 503, 200});
    Waits waits;
    q::WebhookSinkConfig config;
    config.url = server.url();
    config.max_attempts = 3;
    config.retry_backoff_ms = 250;
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", waits.function());
    REQUIRE(sink.has_value());
    auto filed = sink->file(culprit_ticket());
    REQUIRE_MESSAGE(filed.has_value(), filed.error().message);
    CHECK(*filed == q::FileResult::filed);
    CHECK(server.connections() == 3);
    CHECK(waits.ms == std::vector<kiln::DurationMs>{250, 500});
  }
  SUBCASE("409 Conflict") {
    LoopbackServer server({409});
    q::WebhookSinkConfig config;
    config.url = server.url();
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", Waits{}.function());
    REQUIRE(sink.has_value());
    CHECK(sink->file(culprit_ticket()).value() == q::FileResult::duplicate);
    CHECK(server.connections() == 1);
  }
}

TEST_CASE("when every attempt fails the record is removed, so a later run sends the ticket") {
  TempDir dir;
  q::WebhookSinkConfig config;
  config.max_attempts = 2;
  config.retry_backoff_ms = 100;
  {
    LoopbackServer failing({500});
    config.url = failing.url();
    Waits waits;
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", waits.function());
    REQUIRE(sink.has_value());
    auto filed = sink->file(culprit_ticket());
    REQUIRE_FALSE(filed.has_value());
    CHECK(filed.error().message.find(failing.url()) != std::string::npos);
    CHECK(filed.error().message.find("HTTP 500") != std::string::npos);
    CHECK(filed.error().message.find("sent again on the next run") != std::string::npos);
    CHECK(failing.connections() == 2);
    CHECK(waits.ms == std::vector<kiln::DurationMs>{100});
    CHECK_FALSE(fs::exists(sink->record().path_for(culprit_ticket())));
  }
  SUBCASE("a 400 is final: no retry") {
    LoopbackServer rejecting({400});
    config.url = rejecting.url();
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", Waits{}.function());
    REQUIRE(sink.has_value());
    auto filed = sink->file(culprit_ticket());
    REQUIRE_FALSE(filed.has_value());
    CHECK(filed.error().message.find("HTTP 400") != std::string::npos);
    CHECK(rejecting.connections() == 1);
  }
  SUBCASE("the next run succeeds") {
    LoopbackServer healthy({200});
    config.url = healthy.url();
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", Waits{}.function());
    REQUIRE(sink.has_value());
    CHECK(sink->file(culprit_ticket()).value() == q::FileResult::filed);
    CHECK(healthy.connections() == 1);
  }
  SUBCASE("nothing listening: the socket error is named") {
    int port = 0;
    {
      LoopbackServer closed({200});
      port = std::stoi(closed.url().substr(std::string("http://127.0.0.1:").size()));
    }
    config.url = "http://127.0.0.1:" + std::to_string(port) + "/hooks";
    auto sink = q::WebhookTicketSink::open(config, dir.path() / "record", Waits{}.function());
    REQUIRE(sink.has_value());
    auto filed = sink->file(culprit_ticket());
    REQUIRE_FALSE(filed.has_value());
    CHECK(filed.error().message.find("cannot connect") != std::string::npos);
    CHECK(filed.error().message.find(config.url) != std::string::npos);
  }
}

TEST_CASE("a server that never answers times out within timeout_ms") {
  TempDir dir;
  LoopbackServer silent({200}, /*silent=*/true);
  q::WebhookSinkConfig config;
  config.url = silent.url();
  config.timeout_ms = 200;
  config.max_attempts = 1;
  auto sink = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE(sink.has_value());
  const auto started = std::chrono::steady_clock::now();
  auto filed = sink->file(culprit_ticket());
  const auto took = std::chrono::steady_clock::now() - started;
  REQUIRE_FALSE(filed.has_value());
  CHECK(filed.error().code == kiln::Errc::timeout);
  CHECK(filed.error().message.find("timeout_ms 200") != std::string::npos);
  CHECK(took >= std::chrono::milliseconds(190));
  CHECK(took < std::chrono::milliseconds(1000));
  CHECK_FALSE(fs::exists(sink->record().path_for(culprit_ticket())));
}

TEST_CASE("open refuses https, a token file others may read, and headers kiln sets itself") {
  TempDir dir;
  q::WebhookSinkConfig config;
  config.url = "https://tickets.example.com/hooks/kiln";
  auto https = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE_FALSE(https.has_value());
  CHECK(https.error().code == kiln::Errc::config);
  CHECK(https.error().message.find("TLS-terminating proxy") != std::string::npos);
  CHECK(https.error().message.find("directory ticket sink") != std::string::npos);

  config.url = "http://127.0.0.1:9/hooks";
  config.bearer_token_file = write_token(dir, "s3cret", 0644);
  auto readable = q::WebhookTicketSink::open(config, dir.path() / "record");
  REQUIRE_FALSE(readable.has_value());
  CHECK(readable.error().message.find("chmod 600") != std::string::npos);

  config.bearer_token_file = (dir.path() / "missing-token").string();
  CHECK_FALSE(q::WebhookTicketSink::open(config, dir.path() / "record").has_value());

  config.bearer_token_file.clear();
  config.headers = {{"Content-Length", "5"}};
  CHECK_FALSE(q::WebhookTicketSink::open(config, dir.path() / "record").has_value());
  config.headers = {{"X-Evil", "a\r\nInjected: yes"}};
  CHECK_FALSE(q::WebhookTicketSink::open(config, dir.path() / "record").has_value());
  config.headers.clear();
  config.url = "http://user:pw@127.0.0.1/hooks";
  CHECK_FALSE(q::WebhookTicketSink::open(config, dir.path() / "record").has_value());
  config.url = "http://127.0.0.1:99999/hooks";
  CHECK_FALSE(q::WebhookTicketSink::open(config, dir.path() / "record").has_value());
}
