#include "common/health/diag_report.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::health {
namespace {

using nlohmann::json;

json result_json(const CheckResult& r) {
  json out = {{"check", r.check},
              {"chip", nullptr},
              {"status", std::string(to_string(r.status))},
              {"reason_code", r.reason_code},
              {"category", r.category},
              {"message", r.message},
              {"recommended_action", r.recommended_action},
              {"duration_s", r.duration_s},
              {"measured", r.measured},
              {"attributes", r.attributes}};
  if (r.chip) out["chip"] = *r.chip;
  return out;
}

CheckResult result_from_json(const json& in) {
  CheckResult r;
  r.check = in.at("check").get<std::string>();
  if (!in.at("chip").is_null()) r.chip = in.at("chip").get<std::uint32_t>();
  auto status = parse_check_status(in.at("status").get<std::string>());
  if (!status) throw std::invalid_argument(status.error().message);
  r.status = *status;
  r.reason_code = in.at("reason_code").get<std::string>();
  r.category = in.at("category").get<std::string>();
  r.message = in.at("message").get<std::string>();
  r.recommended_action = in.at("recommended_action").get<std::string>();
  r.duration_s = in.at("duration_s").get<double>();
  r.measured = in.at("measured").get<std::map<std::string, double>>();
  r.attributes = in.at("attributes").get<std::map<std::string, std::string>>();
  return r;
}

// What format_timestamp_utc wrote, back in milliseconds since the epoch.
TimeMs parse_timestamp_utc(const std::string& text) {
  std::tm utc{};
  int millis = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%d.%dZ", &utc.tm_year, &utc.tm_mon, &utc.tm_mday, &utc.tm_hour,
                  &utc.tm_min, &utc.tm_sec, &millis) != 7) {
    throw std::invalid_argument("'" + text + "' is not a time such as 2026-11-30T04:53:51.963Z");
  }
  utc.tm_year -= 1900;
  utc.tm_mon -= 1;
  return static_cast<TimeMs>(::timegm(&utc)) * 1000 + millis;
}

std::string upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// A table cell: what did not pass stands out.
std::string cell(CheckStatus status) {
  return status == CheckStatus::warn || status == CheckStatus::fail ? upper(to_string(status))
                                                                    : std::string(to_string(status));
}

// One result with its message; one that did not pass also with its reason and what to do.
void expand(std::string& out, const CheckResult& r) {
  const std::string subject = r.check + (r.chip ? " [chip " + std::to_string(*r.chip) + "]" : "");
  out += fmt::format("  {:<4}  {:<28} {}\n", upper(to_string(r.status)), subject, r.message);
  if (r.status == CheckStatus::pass) return;
  out += "        reason " + r.reason_code + ", category " + r.category + "\n";
  if (!r.recommended_action.empty()) out += "        action: " + r.recommended_action + "\n";
}

}  // namespace

std::string format_timestamp_utc(TimeMs at_ms) {
  const std::time_t seconds = static_cast<std::time_t>(at_ms / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char millis[8];
  std::snprintf(millis, sizeof millis, ".%03dZ", static_cast<int>(at_ms % 1000));
  return std::string(text) + millis;
}

std::string format_diag_text(const DiagReport& report) {
  std::string out = fmt::format("kiln diagnostics level {} on node {}, revision {}: {}\n", report.level,
                                report.node.empty() ? "(unnamed)" : report.node,
                                report.revision.empty() ? "unknown" : report.revision, upper(to_string(report.verdict)));
  out += fmt::format("started {}, took {:.1f} s\n\n", format_timestamp_utc(report.started_at_ms),
                     static_cast<double>(report.finished_at_ms - report.started_at_ms) / 1000.0);
  // Per-chip checks in the order they ran, and the chips they ran on.
  std::vector<std::string> checks;
  std::set<std::uint32_t> chips;
  std::map<std::pair<std::string, std::uint32_t>, CheckStatus> status_of;
  for (const auto& r : report.results) {
    if (!r.chip) {
      expand(out, r);
      continue;
    }
    if (std::find(checks.begin(), checks.end(), r.check) == checks.end()) checks.push_back(r.check);
    chips.insert(*r.chip);
    status_of[{r.check, *r.chip}] = r.status;
  }
  if (!checks.empty()) {
    std::size_t check_width = 5;  // "check"
    for (const auto& check : checks) check_width = std::max(check_width, check.size());
    out += fmt::format("\n  {:<{}}", "chip", check_width);
    for (std::uint32_t chip : chips) out += fmt::format("  {:>4}", chip);
    out += "\n";
    for (const auto& check : checks) {
      out += fmt::format("  {:<{}}", check, check_width);
      for (std::uint32_t chip : chips) {
        auto it = status_of.find({check, chip});
        out += fmt::format("  {:>4}", it == status_of.end() ? "-" : cell(it->second));
      }
      out += "\n";
    }
    bool header = false;
    for (const auto& r : report.results) {
      if (!r.chip || r.status == CheckStatus::pass) continue;
      if (!header) out += "\n";
      header = true;
      expand(out, r);
    }
  }
  out += "\n" + summarize(report.results) + "\n";
  return out;
}

std::string format_diag_json(const DiagReport& report) {
  json results = json::array();
  for (const auto& result : report.results) results.push_back(result_json(result));
  json out = {{"level", report.level},
              {"node", report.node},
              {"revision", report.revision},
              {"verdict", std::string(to_string(report.verdict))},
              {"summary", summarize(report.results)},
              {"started_at", format_timestamp_utc(report.started_at_ms)},
              {"finished_at", format_timestamp_utc(report.finished_at_ms)},
              {"duration_s", static_cast<double>(report.finished_at_ms - report.started_at_ms) / 1000.0},
              {"results", std::move(results)}};
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<DiagReport> parse_diag_json(std::string_view text) {
  try {
    const json in = json::parse(text);
    DiagReport report;
    report.level = in.at("level").get<int>();
    report.node = in.at("node").get<std::string>();
    report.revision = in.at("revision").get<std::string>();
    auto verdict = parse_check_status(in.at("verdict").get<std::string>());
    if (!verdict) return tl::unexpected(verdict.error());
    report.verdict = *verdict;
    report.started_at_ms = parse_timestamp_utc(in.at("started_at").get<std::string>());
    report.finished_at_ms = parse_timestamp_utc(in.at("finished_at").get<std::string>());
    for (const auto& result : in.at("results")) report.results.push_back(result_from_json(result));
    return report;
  } catch (const std::exception& error) {
    return fail(Errc::bad_message, std::string("unreadable diagnostics report (") + error.what() +
                                       "); it must hold level, node, revision, verdict, started_at, finished_at "
                                       "and results (docs/health.md)");
  }
}

std::string check_result_to_json(const CheckResult& result) {
  return result_json(result).dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<CheckResult> parse_check_result_json(std::string_view text) {
  try {
    return result_from_json(json::parse(text));
  } catch (const std::exception& error) {
    return fail(Errc::bad_message,
                std::string("unreadable check result JSON (") + error.what() +
                    "); it must hold check, chip, status, reason_code, category, message, "
                    "recommended_action, duration_s, measured and attributes");
  }
}

}  // namespace kiln::health
