// The HTTP request parser, the response writer and the router, as pure code.
#include <doctest/doctest.h>

#include "common/http/listen_address.h"
#include "common/http/request.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::http;
using kiln::testing::contains;

namespace {

Request parsed_request(std::string_view bytes) {
  const Parsed parsed = parse_request(bytes);
  REQUIRE(std::holds_alternative<Request>(parsed));
  return std::get<Request>(parsed);
}

Refusal refusal_of(std::string_view bytes, const RequestLimits& limits = {}) {
  const Parsed parsed = parse_request(bytes, limits);
  REQUIRE(std::holds_alternative<Refusal>(parsed));
  return std::get<Refusal>(parsed);
}

Response text_page(std::string text) {
  Response response;
  response.body = std::move(text);
  return response;
}

}  // namespace

TEST_CASE("a GET as Prometheus sends it is read whole") {
  const Request r = parsed_request(
      "GET /metrics?debug=1 HTTP/1.1\r\nHost: 127.0.0.1:9470\r\nUser-Agent: Prometheus/2.42.0\r\n"
      "Accept: text/plain;version=0.0.4;q=1\r\nX-Prometheus-Scrape-Timeout-Seconds:   10 \r\n\r\n");
  CHECK(r.method == "GET");
  CHECK(r.path == "/metrics");
  CHECK(r.query == "debug=1");
  CHECK(r.version == "HTTP/1.1");
  REQUIRE(r.headers.size() == 4);
  CHECK(r.headers[0] == std::pair<std::string, std::string>{"host", "127.0.0.1:9470"});
  REQUIRE(r.header("x-prometheus-scrape-timeout-seconds") != nullptr);
  CHECK(*r.header("x-prometheus-scrape-timeout-seconds") == "10");
  CHECK(r.header("cookie") == nullptr);
}

TEST_CASE("a request head cut anywhere asks for more bytes") {
  const std::string whole = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
  for (std::size_t cut = 0; cut < whole.size(); ++cut) {
    CAPTURE(cut);
    CHECK(std::holds_alternative<Incomplete>(parse_request(whole.substr(0, cut))));
  }
  CHECK(std::holds_alternative<Request>(parse_request(whole)));
  // A body after the head is not read.
  CHECK(std::holds_alternative<Request>(parse_request(whole + "trailing bytes")));
}

TEST_CASE("empty lines before the request line are skipped; HTTP/1.0 needs no Host") {
  const Request r = parsed_request("\r\n\r\nGET /a HTTP/1.0\r\n\r\n");
  CHECK(r.path == "/a");
  CHECK(r.version == "HTTP/1.0");
  CHECK(parsed_request("GET / HTTP/1.9\r\nHost: h\r\n\r\n").version == "HTTP/1.1");
}

TEST_CASE("malformed requests are refused with the status RFC 9112 gives them") {
  CHECK(refusal_of("GET /\r\n\r\n").status == 400);                          // no version
  CHECK(refusal_of("GET  / HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);     // two spaces
  CHECK(refusal_of("GET / HTTP/1.1 x\r\nHost: h\r\n\r\n").status == 400);    // a fourth part
  CHECK(refusal_of("G(T / HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);      // not a token
  CHECK(refusal_of("GET metrics HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);  // not a path
  CHECK(refusal_of("GET /\x01 HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTQ/1.1\r\nHost: h\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTP/2.0\r\nHost: h\r\n\r\n").status == 505);
  CHECK(refusal_of("GET / HTTP/1.1\r\n\r\n").status == 400);                    // no Host
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost : h\r\n\r\n").status == 400);       // space before colon
  CHECK(refusal_of("GET / HTTP/1.1\r\nNoColon\r\nHost: h\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: h\x7f\r\n\r\n").status == 400);
  CHECK(refusal_of("GET / HTTP/1.1\nHost: h\r\n\r\n").status == 400);          // a bare LF
  const Refusal bare_cr = refusal_of("GET / HTTP/1.1\r\nHost: h\rx\r\n\r\n");
  CHECK(bare_cr.status == 400);
  CHECK(contains(bare_cr.reason, "CRLF"));
}

TEST_CASE("a request over the limits is refused, also before its head is whole") {
  RequestLimits limits;
  limits.max_head_bytes = 64;
  limits.max_target_bytes = 16;
  limits.max_headers = 2;
  CHECK(refusal_of(std::string(65, 'G'), limits).status == 431);
  CHECK(refusal_of("GET /" + std::string(16, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n", limits).status == 414);
  CHECK(refusal_of("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n", limits).status == 431);
  CHECK(std::holds_alternative<Request>(parse_request("GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\n\r\n", limits)));
  // Empty lines before the request line count too (found by fuzzing: an endless run of them was
  // kept waiting for a head).
  CHECK(refusal_of("\r\n" + std::string(63, 'G'), limits).status == 431);
  CHECK(refusal_of(std::string(64, '\r') + "\n", limits).status == 431);
  std::string crlfs;
  for (int i = 0; i < 40; ++i) crlfs += "\r\n";
  CHECK(refusal_of(crlfs, limits).status == 431);
}

TEST_CASE("an answer carries its length and closes the connection; HEAD drops the body") {
  Response response = text_page("hello\n");
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.headers.emplace_back("Cache-Control", "no-store");
  CHECK(serialize(response, false) ==
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 6\r\n"
        "Connection: close\r\nCache-Control: no-store\r\n\r\nhello\n");
  CHECK(serialize(response, true) ==
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 6\r\n"
        "Connection: close\r\nCache-Control: no-store\r\n\r\n");
  CHECK(reason_phrase(404) == "Not Found");
  CHECK(text_response(503, "busy").body == "busy\n");
}

TEST_CASE("the router serves exact paths, then the longest prefix; 404 and 405 otherwise") {
  Router router;
  router.exact("/metrics", [](const Request&) { return text_page("metrics"); });
  router.exact("/", [](const Request&) { return text_page("index"); });
  router.prefix("/runs/", [](const Request& r) { return text_page("run " + r.path.substr(6)); });
  router.prefix("/runs/special/", [](const Request&) { return text_page("special"); });
  const auto get = [&](const std::string& method, const std::string& target) {
    return respond(parse_request(method + " " + target + " HTTP/1.1\r\nHost: h\r\n\r\n"), router);
  };
  CHECK(get("GET", "/metrics").body == "metrics");
  CHECK(get("HEAD", "/metrics").body == "metrics");  // the body is dropped when serialized
  CHECK(get("GET", "/metrics?x=1").body == "metrics");
  CHECK(get("GET", "/").body == "index");
  CHECK(get("GET", "/runs/r1.html").body == "run r1.html");
  CHECK(get("GET", "/runs/special/x").body == "special");
  const Response missing = get("GET", "/metricsx");
  CHECK(missing.status == 404);
  CHECK(contains(missing.body, "nothing at /metricsx; this server answers /, /metrics, /runs/special/, /runs/"));
  const Response post = get("POST", "/metrics");
  CHECK(post.status == 405);
  REQUIRE(post.headers.size() == 1);
  CHECK(post.headers[0] == std::pair<std::string, std::string>{"Allow", "GET, HEAD"});
  const Response refused = respond(parse_request("GET / HTTP/3.0\r\nHost: h\r\n\r\n"), router);
  CHECK(refused.status == 505);
  CHECK(contains(refused.body, "use HTTP/1.1"));
}

TEST_CASE("listen addresses are HOST:PORT, an IPv6 host in brackets") {
  auto v4 = parse_listen_address("127.0.0.1:9470");
  REQUIRE(v4.has_value());
  CHECK(v4->host == "127.0.0.1");
  CHECK(v4->port == 9470);
  CHECK(v4->text() == "127.0.0.1:9470");
  auto v6 = parse_listen_address("[::1]:9471");
  REQUIRE(v6.has_value());
  CHECK(v6->host == "::1");
  CHECK(v6->text() == "[::1]:9471");
  CHECK(parse_listen_address("metrics.lab-1.example:80").has_value());
  for (const char* bad : {"9470", ":9470", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:94x0",
                          "::1:9470", "[]:9470", "[zz]:9470", "host name:80", "http://h:80"}) {
    CAPTURE(bad);
    auto parsed = parse_listen_address(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(contains(parsed.error().message, "as in 127.0.0.1:9470"));
  }
  CHECK(parse_listen_address("127.0.0.1:0", /*port_zero_allowed=*/true).has_value());
}
