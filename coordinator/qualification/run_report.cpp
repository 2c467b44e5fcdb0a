#include "coordinator/qualification/run_report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "coordinator/qualification/run_evidence.h"

namespace kiln::qualification {

using json = nlohmann::json;

nlohmann::json to_json(const RunReport& report) {
  json models = json::array();
  for (const ModelReport& m : report.models) {
    json entry = {{"model", m.model},
                  {"revision", m.revision},
                  {"owner_team", m.owner_team},
                  {"verdict", to_string(m.verdict)},
                  {"fails_run", fails_run(m.verdict)},
                  {"detail", m.detail},
                  {"ticket_ids", m.ticket_ids},
                  {"nodes", m.nodes},
                  {"duration_ms", m.duration_ms}};
    entry["performance"] = m.performance ? to_json(*m.performance) : json(nullptr);
    entry["triage"] = m.triage ? to_json(*m.triage) : json(nullptr);
    entry["bisection"] = m.bisection ? to_json(*m.bisection) : json(nullptr);
    models.push_back(std::move(entry));
  }
  json tickets = json::array();
  for (const Ticket& t : report.tickets) tickets.push_back(json::parse(to_json_text(t)));
  std::map<std::string, std::size_t> counts;
  for (const ModelReport& m : report.models) ++counts[std::string(to_string(m.verdict))];
  return {{"schema", "kiln.qualification-run/1"},
          {"run_id", report.run_id},
          {"tier", to_string(report.tier)},
          {"candidate_bundle_id", report.candidate_bundle_id},
          {"baseline_bundle_ids", report.baseline_bundle_ids},
          {"finished", report.finished},
          {"passed", report.passed},
          {"started_at_ms", report.started_at_ms},
          {"finished_at_ms", report.finished_at_ms},
          {"jobs_started", report.jobs_started},
          {"verdict_counts", counts},
          {"models", std::move(models)},
          {"tickets", std::move(tickets)}};
}

std::string summary_text(const RunReport& report) {
  std::string out = fmt::format("kiln {} {}: {} (candidate {})\n", to_string(report.tier), report.run_id,
                                !report.finished ? "running"
                                : report.passed  ? "passed"
                                                 : "FAILED",
                                report.candidate_bundle_id.substr(0, 12));
  std::map<ModelVerdict, std::size_t> counts;
  for (const ModelReport& m : report.models) ++counts[m.verdict];
  std::vector<std::string> parts;
  for (const auto& [verdict, count] : counts) parts.push_back(fmt::format("{} {}", count, to_string(verdict)));
  out += fmt::format("  {} model runs: {}\n", report.models.size(), fmt::join(parts, ", "));
  for (const ModelReport& m : report.models) {
    if (!fails_run(m.verdict) && m.verdict != ModelVerdict::inconclusive && m.verdict != ModelVerdict::flaky) continue;
    out += fmt::format("  {} {} on revision {} ({}): {}: {}\n", fails_run(m.verdict) ? "FAIL" : "LOOK", m.model,
                       m.revision, m.owner_team, to_string(m.verdict), m.detail);
  }
  for (const Ticket& t : report.tickets) {
    out += fmt::format("  ticket {} to {}: {} ({})\n", t.id, t.team, t.title, to_string(t.kind));
  }
  return out;
}

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

std::string to_junit_xml(const RunReport& report) {
  std::vector<std::string> revisions;
  for (const ModelReport& m : report.models) {
    if (std::find(revisions.begin(), revisions.end(), m.revision) == revisions.end()) revisions.push_back(m.revision);
  }
  const std::string classname = fmt::format("kiln.{}", to_string(report.tier));
  std::size_t all_failures = 0;
  std::size_t all_errors = 0;
  std::size_t all_skipped = 0;
  DurationMs all_ms = 0;  // the suites' times add up to the whole's, as the counts do
  std::string suites;
  for (const auto& revision : revisions) {
    std::size_t tests = 0;
    std::size_t failures = 0;
    std::size_t errors = 0;
    std::size_t skipped = 0;
    DurationMs total_ms = 0;
    std::string cases;
    for (const ModelReport& m : report.models) {
      if (m.revision != revision) continue;
      ++tests;
      total_ms += m.duration_ms;
      cases += fmt::format("    <testcase name=\"{}\" classname=\"{}\" time=\"{}\">\n", xml_escape(m.model),
                           xml_escape(classname), seconds(m.duration_ms));
      if (m.verdict == ModelVerdict::skipped) {
        ++skipped;
        cases += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(m.detail));
      } else if (m.verdict == ModelVerdict::error) {
        // Not measured: an <error>, which CI shows apart from a model that failed.
        ++errors;
        const std::string message = fmt::format("could not be measured: {}", m.detail);
        cases += fmt::format("      <error message=\"{}\" type=\"error\">{}</error>\n", xml_escape(message),
                             xml_escape(message));
      } else if (fails_run(m.verdict)) {
        ++failures;
        const std::string message = fmt::format("{}: {}", to_string(m.verdict), m.detail);
        cases += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n", xml_escape(message),
                             to_string(m.verdict), xml_escape(message));
      }
      std::string out = fmt::format("verdict: {}\nowner: {}\n", to_string(m.verdict), m.owner_team);
      if (!m.ticket_ids.empty()) out += fmt::format("tickets: {}\n", fmt::join(m.ticket_ids, ", "));
      if (!m.nodes.empty()) out += fmt::format("nodes: {}\n", fmt::join(m.nodes, ", "));
      cases += fmt::format("      <system-out>{}</system-out>\n", xml_escape(out));
      cases += "    </testcase>\n";
    }
    all_failures += failures;
    all_errors += errors;
    all_skipped += skipped;
    all_ms += total_ms;
    suites += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" "
                          "time=\"{}\">\n{}  </testsuite>\n",
                          xml_escape(fmt::format("{} revision {}", classname, revision)), tests, failures, errors,
                          skipped,
                          seconds(total_ms), cases);
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"{}\" tests=\"{}\" "
                     "failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">\n{}</testsuites>\n",
                     xml_escape(fmt::format("{} {}", classname, report.run_id)), report.models.size(), all_failures,
                     all_errors, all_skipped, seconds(all_ms), suites);
}

Result<RunReport> report_outline_from_json(const nlohmann::json& document) {
  const auto bad = [](std::string_view what) {
    return fail(Errc::bad_message, fmt::format("the run report is not a kiln.qualification-run/1 document ({})", what));
  };
  if (!document.is_object() || document.value("schema", "") != "kiln.qualification-run/1") return bad("schema");
  try {
    RunReport report;
    report.run_id = document.at("run_id").get<std::string>();
    auto tier = tier_from_string(document.at("tier").get<std::string>());
    if (!tier) return bad("tier");
    report.tier = *tier;
    report.candidate_bundle_id = document.at("candidate_bundle_id").get<std::string>();
    report.baseline_bundle_ids = document.at("baseline_bundle_ids").get<std::map<std::string, std::string>>();
    report.finished = document.at("finished").get<bool>();
    report.passed = document.at("passed").get<bool>();
    report.started_at_ms = document.at("started_at_ms").get<TimeMs>();
    report.finished_at_ms = document.at("finished_at_ms").get<TimeMs>();
    report.jobs_started = document.at("jobs_started").get<std::size_t>();
    for (const auto& entry : document.at("models")) {
      ModelReport m;
      m.model = entry.at("model").get<std::string>();
      m.revision = entry.at("revision").get<std::string>();
      m.owner_team = entry.at("owner_team").get<std::string>();
      auto verdict = enum_from_name<ModelVerdict>(entry.at("verdict").get<std::string>());
      if (!verdict) return bad("a model's verdict");
      m.verdict = *verdict;
      m.detail = entry.at("detail").get<std::string>();
      m.ticket_ids = entry.at("ticket_ids").get<std::vector<std::string>>();
      m.nodes = entry.at("nodes").get<std::vector<std::string>>();
      m.duration_ms = entry.at("duration_ms").get<DurationMs>();
      report.models.push_back(std::move(m));
    }
    for (const auto& entry : document.at("tickets")) {
      auto ticket = ticket_from_json_text(entry.dump(), "the run report");
      if (!ticket) return tl::unexpected(ticket.error());
      report.tickets.push_back(std::move(*ticket));
    }
    return report;
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
}

}  // namespace kiln::qualification
