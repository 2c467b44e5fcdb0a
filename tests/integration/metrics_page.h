// A /metrics page as Prometheus reads it, for the tests that check what the processes count.
#pragma once

#include <string>

#include <doctest/doctest.h>

#include "common/http/client.h"
#include "tests/support/text.h"

namespace kiln::testing {

inline std::string http_table(const std::string& address) { return "[http]\nlisten = \"" + address + "\"\n"; }

inline std::string scrape(const std::string& address) {
  const kiln::http::Answer answer = kiln::http::get(address, "/metrics");
  INFO("GET http://" << address << "/metrics answered " << answer.status << ": " << answer.body);
  REQUIRE(answer.status == 200);
  CHECK(contains(answer.head, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  return answer.body;
}

// The line of `page` that starts with `series` (a name and the start of its labels), or "".
inline std::string line_of(const std::string& page, const std::string& series) {
  const auto at = page.find("\n" + series);
  if (at == std::string::npos) return "";
  return page.substr(at + 1, page.find('\n', at + 1) - at - 1);
}

// The value of the sample `series` (a name with all its labels) on `page`; 0 when it is absent,
// as Prometheus reads a counter not yet exposed.
inline double sample_value(const std::string& page, const std::string& series) {
  const std::string line = line_of(page, series + " ");
  return line.empty() ? 0.0 : std::stod(line.substr(line.rfind(' ') + 1));
}

}  // namespace kiln::testing
