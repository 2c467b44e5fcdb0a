#include "qualification/junit.h"

#include <fmt/format.h>

namespace kiln::qualification {

namespace {

// XML 1.0 text and attribute values: the five entities, and characters XML forbids dropped.
std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      case '\r': out += "&#13;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) continue;
        out += c;
    }
  }
  return out;
}

std::string seconds(DurationMs ms) { return fmt::format("{:.3f}", static_cast<double>(ms) / 1000.0); }

}  // namespace

std::string junit_xml(std::string_view name, const std::vector<JunitSuite>& suites) {
  using Outcome = JunitCase::Outcome;
  std::size_t all_tests = 0;
  std::size_t all_failures = 0;
  std::size_t all_errors = 0;
  std::size_t all_skipped = 0;
  DurationMs all_ms = 0;  // the suites' times add up to the whole's, as the counts do
  std::string body;
  for (const JunitSuite& suite : suites) {
    std::size_t failures = 0;
    std::size_t errors = 0;
    std::size_t skipped = 0;
    DurationMs total_ms = 0;
    std::string cases;
    for (const JunitCase& c : suite.cases) {
      total_ms += c.duration_ms;
      cases += fmt::format("    <testcase name=\"{}\" classname=\"{}\" time=\"{}\">\n", xml_escape(c.name),
                           xml_escape(c.classname), seconds(c.duration_ms));
      switch (c.outcome) {
        case Outcome::passed: break;
        case Outcome::skipped:
          ++skipped;
          cases += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(c.message));
          break;
        case Outcome::error:
          ++errors;
          cases += fmt::format("      <error message=\"{}\" type=\"error\">{}</error>\n", xml_escape(c.message),
                               xml_escape(c.message));
          break;
        case Outcome::failed:
          ++failures;
          cases += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml_escape(c.message),
                               xml_escape(c.type), xml_escape(c.message));
          break;
      }
      if (!c.system_out.empty()) cases += fmt::format("      <system-out>{}</system-out>\n", xml_escape(c.system_out));
      cases += "    </testcase>\n";
    }
    all_tests += suite.cases.size();
    all_failures += failures;
    all_errors += errors;
    all_skipped += skipped;
    all_ms += total_ms;
    body += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
                        "time=\"{}\">\n{}  </testsuite>\n",
                        xml_escape(suite.name), suite.cases.size(), failures, errors, skipped, seconds(total_ms),
                        cases);
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{}\" "
                     "failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">\n{}</testsuites>\n",
                     xml_escape(name), all_tests, all_failures, all_errors, all_skipped, seconds(all_ms), body);
}

}  // namespace kiln::qualification
