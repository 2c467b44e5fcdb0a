#include "coordinator/qualifier/waiver_watch.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "coordinator/qualification/risk_status.h"
#include "coordinator/qualification/shell/records_client.h"
#include "coordinator/qualifier/qualifier_log.h"
#include "coordinator/qualifier/run_pages.h"
#include "coordinator/qualifier/ticket_sinks.h"

namespace kiln::qualifier {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

void WaivedRuns::note(const nlohmann::json& report) {
  const RunKey key{kind_of(report), report.value("run_id", "")};
  std::lock_guard lock(mutex_);
  auto waivers = report.find("waivers");
  if (waivers != report.end() && waivers->is_array() && !waivers->empty()) {
    relied_[key] = *waivers;
  } else {
    relied_.erase(key);
  }
}

std::vector<WaivedRuns::RunKey> WaivedRuns::due(const std::vector<q::Waiver>& recorded, TimeMs now) const {
  std::lock_guard lock(mutex_);
  std::vector<RunKey> runs;
  for (const auto& [key, waivers] : relied_) {
    if (std::any_of(waivers.begin(), waivers.end(),
                    [&](const nlohmann::json& w) { return !q::why_lapsed(w, recorded, now).empty(); })) {
      runs.push_back(key);
    }
  }
  return runs;
}

protocol::RecordKind WaivedRuns::kind_of(const nlohmann::json& report) {
  return report.value("schema", "") == "kiln.stability-run/1" ? protocol::RecordKind::stability_run
                                                              : protocol::RecordKind::qualification_run;
}

void judge_waived_runs(cli::Client& client, const QualifierConfig& config, const q::RiskRegister& risks,
                       std::set<std::string>& seen, WaivedRuns& waived, RecentRuns& recent) {
  const auto record_again = [&](nlohmann::json& report, const std::string& run_id) {
    const protocol::RecordKind kind = WaivedRuns::kind_of(report);
    if (auto ok = qs::record_run(client, run_id, report, kind); !ok) {
      say(fmt::format("run {}: could not record it judged again: {}", run_id, ok.error().message));
      return false;
    }
    waived.note(report);
    if (kind == protocol::RecordKind::stability_run) return true;  // it has no report pages
    recent.judged_again(report);
    std::ostringstream problems;
    RunPages pages(config.reports_dir, recent, problems);
    pages.read_other_runs(client);
    pages.write(report);
    if (!problems.str().empty()) say(problems.str());
    return true;
  };
  auto waivers = qs::list_waivers(client);
  if (!waivers) return;
  const TimeMs now = wall_now_ms();
  for (const auto& [kind, run_id] : waived.due(*waivers, now)) {
    auto report = qs::get_run(client, run_id, kind);
    if (!report) continue;
    const auto lapsed = q::revoke_lapsed_waivers(*report, *waivers, now);
    if (lapsed.empty()) {
      waived.note(*report);
      continue;
    }
    const auto again = q::apply_waivers(*report, *waivers, risks, now);
    if (!record_again(*report, run_id)) continue;
    say(fmt::format("run {} judged again: its waiver lapsed ({}), {}", run_id, fmt::join(lapsed, "; "),
                    report->value("passed", false) ? fmt::format("it passes by {}", fmt::join(again, "; "))
                                                   : std::string("it fails")));
  }
  for (const auto& waiver : *waivers) {
    if (!seen.insert(fmt::format("{}@{}", q::waiver_key(waiver), waiver.created_at_ms)).second) continue;
    if (risks.find(waiver.scope) != nullptr) continue;  // a risk's waiver: for the runs to come
    auto report = qs::get_run(client, waiver.scope);
    if (!report && report.error().code == Errc::not_found) {
      report = qs::get_run(client, waiver.scope, protocol::RecordKind::stability_run);
    }
    if (!report || !report->value("finished", false) || report->value("passed", false)) continue;
    const auto texts = q::apply_waivers(*report, *waivers, risks, now);
    if (texts.empty() || !record_again(*report, waiver.scope)) continue;
    say(fmt::format("run {} judged again: {}{}", waiver.scope, report->value("passed", false) ? "passed, " : "",
                    fmt::join(texts, "; ")));
  }
}

void judge_stability_runs(cli::Client& client, const QualifierConfig& config, const q::RiskRegister& risks,
                          std::uint64_t& after_seq, WaivedRuns& waived) {
  if (risks.risks.empty()) return;  // no register: nothing to judge them by, yet
  std::uint64_t seq = after_seq;
  auto runs = qs::list_runs_after(client, seq, protocol::RecordKind::stability_run);
  if (!runs) return say("could not list the stability runs: " + runs.error().message);
  auto waivers = qs::list_waivers(client);
  if (!waivers) return say("could not list the waivers; the stability runs are judged later: " + waivers.error().message);
  for (auto& report : *runs) {
    if (report.value("judged", false) || !report.value("finished", false)) continue;
    const std::string run_id = report.value("run_id", "");
    for (const auto& text : q::apply_waivers(report, *waivers, risks, wall_now_ms())) {
      say(fmt::format("stability run {}: {}", run_id, text));
    }
    RecordTicketSink sink(client, run_id, {ticket_sink_name(config.webhook_config)});
    for (const auto& ticket : q::risk_gate_tickets(risks, report, wall_now_ms())) {
      if (auto filed = sink.file(ticket); !filed) {
        say(fmt::format("stability run {}: could not page {} for {}: {}", run_id, ticket.team, ticket.title,
                        filed.error().message));
        return;  // judged again on the next poll; a ticket filed twice is kept once
      } else if (*filed == q::FileResult::filed) {
        say(fmt::format("stability run {}: paged {} ({}): {}", run_id, ticket.team, ticket.severity, ticket.title));
      }
    }
    report["judged"] = true;
    if (auto ok = qs::record_run(client, run_id, report, protocol::RecordKind::stability_run); !ok) {
      return say(fmt::format("stability run {}: could not record it judged: {}", run_id, ok.error().message));
    }
    waived.note(report);
  }
  after_seq = seq;
}

}  // namespace kiln::qualifier
