// The diagnostics report as people read it (the agent's local diag and the remote kiln diag print
// the same text) and as JSON, read back by the kiln client.
#include <doctest/doctest.h>

#include "common/health/diag_report.h"

namespace kiln::health {
namespace {

CheckResult result(std::string check, std::optional<std::uint32_t> chip, CheckStatus status, std::string message) {
  CheckResult r;
  r.check = std::move(check);
  r.chip = chip;
  r.status = status;
  r.reason_code = status == CheckStatus::pass ? "ok" : "ecc_uncorrected";
  r.category = category::memory;
  r.message = std::move(message);
  if (status != CheckStatus::pass) r.recommended_action = "drain and run level 3 diagnostics";
  r.measured["temperature_c"] = 61.5;
  return r;
}

DiagReport sample_report() {
  DiagReport report;
  report.level = 1;
  report.node = "n07";
  report.revision = "a";
  report.started_at_ms = 1764478431963;  // 2025-11-30T04:53:51.963Z
  report.finished_at_ms = report.started_at_ms + 400;
  report.results = {result("driver", std::nullopt, CheckStatus::pass, "kiln-sim 0.1.0 loaded, 2 chips"),
                    result("ecc", 0u, CheckStatus::pass, "no ECC errors"),
                    result("ecc", 1u, CheckStatus::fail, "chip 1 has 1 uncorrected ECC error"),
                    result("thermal", 0u, CheckStatus::pass, "61.5 C"),
                    result("thermal", 1u, CheckStatus::skip, "not probed")};
  report.verdict = verdict(report.results);
  return report;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("the text report is a chip x check table after the node-wide checks, the failing rows expanded") {
  const std::string text = format_diag_text(sample_report());
  CHECK(has(text, "kiln diagnostics level 1 on node n07, revision a: FAIL\n"));
  CHECK(has(text, "started 2025-11-30T04:53:51.963Z, took 0.4 s\n"));
  CHECK(has(text, "  PASS  driver                       kiln-sim 0.1.0 loaded, 2 chips\n"));
  CHECK_MESSAGE(has(text, "  chip        0     1\n"), text);
  CHECK(has(text, "  ecc      pass  FAIL\n"));
  CHECK(has(text, "  thermal  pass  skip\n"));
  CHECK(has(text, "  FAIL  ecc [chip 1]                 chip 1 has 1 uncorrected ECC error\n"
                  "        reason ecc_uncorrected, category memory\n"
                  "        action: drain and run level 3 diagnostics\n"));
  CHECK(has(text, "  SKIP  thermal [chip 1]"));
  CHECK_FALSE(has(text, "ecc [chip 0]"));  // a pass is a table cell, not a line of its own
  CHECK(has(text, "\n3 pass, 0 warn, 1 fail, 1 skip\n"));
}

TEST_CASE("a chip a check did not run on shows a dash") {
  DiagReport report = sample_report();
  report.results.push_back(result("memory", 0u, CheckStatus::pass, "level 2 self-test passed"));
  CHECK(has(format_diag_text(report), "  memory   pass     -\n"));
}

TEST_CASE("the JSON report reads back as the report it was written from") {
  const DiagReport report = sample_report();
  auto back = parse_diag_json(format_diag_json(report));
  REQUIRE_MESSAGE(back, (back ? "" : back.error().message));
  CHECK(back->level == 1);
  CHECK(back->node == "n07");
  CHECK(back->verdict == CheckStatus::fail);
  CHECK(back->started_at_ms == report.started_at_ms);
  CHECK(back->finished_at_ms == report.finished_at_ms);
  REQUIRE(back->results.size() == report.results.size());
  CHECK(back->results[2].chip == 1u);
  CHECK(back->results[2].recommended_action == "drain and run level 3 diagnostics");
  CHECK(back->results[0].measured.at("temperature_c") == 61.5);
  CHECK(format_diag_text(*back) == format_diag_text(report));

  auto bad = parse_diag_json("{\"level\": 1}");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::bad_message);
  CHECK(has(bad.error().message, "docs/health.md"));
  CHECK_FALSE(parse_diag_json("not json"));
}

}  // namespace
}  // namespace kiln::health
