#include "qualifier/waiver_watch.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qualification/stability_gates.h"
#include "client/records_client.h"
#include "qualifier/qualifier_log.h"
#include "qualifier/run_pages.h"
#include "qualifier/ticket_sinks.h"
#include "qualification/shell/lapsed_waivers.h"

namespace kiln::qualifier {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

void WaivedRuns::note(const q::GateRun& run) {
  const RunKey key{kind_of(run), run.run_id};
  std::lock_guard lock(mutex_);
  if (!run.waivers.empty()) {
    relied_[key] = run.waivers;
  } else {
    relied_.erase(key);
  }
}

std::vector<WaivedRuns::RunKey> WaivedRuns::due(const std::vector<q::Waiver>& recorded, TimeMs now) const {
  std::lock_guard lock(mutex_);
  std::vector<RunKey> runs;
  for (const auto& [key, waivers] : relied_) {
    if (std::any_of(waivers.begin(), waivers.end(),
                    [&](const q::RecordedWaiver& w) { return !q::why_lapsed(w, recorded, now).empty(); })) {
      runs.push_back(key);
    }
  }
  return runs;
}

protocol::RecordKind WaivedRuns::kind_of(const q::GateRun& run) {
  return run.schema == q::kStabilityRunSchema ? protocol::RecordKind::stability_run
                                              : protocol::RecordKind::qualification_run;
}

void judge_waived_runs(cli::Client& client, const QualifierConfig& config, const q::RiskRegister& risks,
                       std::set<std::string>& seen, WaivedRuns& waived, RecentRuns& recent) {
  const auto record_again = [&](const q::GateRun& run, const std::string& run_id) {
    const protocol::RecordKind kind = WaivedRuns::kind_of(run);
    const nlohmann::json report = q::to_json(run);
    if (auto ok = qs::record_run(client, run_id, report, kind); !ok) {
      say(fmt::format("run {}: could not record it judged again: {}", run_id, ok.error().message));
      return false;
    }
    waived.note(run);
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
    auto revoked = q::revoke_lapsed_waivers(q::gate_run_from_report(*report), *waivers, now);
    if (revoked.texts.empty()) {
      waived.note(revoked.run);
      continue;
    }
    const auto again = q::apply_waivers(std::move(revoked.run), *waivers, risks, now);
    if (!record_again(again.run, run_id)) continue;
    say(fmt::format("run {} judged again: its waiver lapsed ({}), {}", run_id, fmt::join(revoked.texts, "; "),
                    again.run.passed ? fmt::format("it passes by {}", fmt::join(again.texts, "; "))
                                     : std::string("it fails")));
  }
  for (const auto& waiver : *waivers) {
    if (!seen.insert(fmt::format("{}@{}", q::waiver_key(waiver), waiver.created_at_ms)).second) continue;
    if (risks.find(waiver.scope) != nullptr) continue;  // a risk's waiver: for the runs to come
    auto report = qs::get_run(client, waiver.scope);
    if (!report && report.error().code == Errc::not_found) {
      report = qs::get_run(client, waiver.scope, protocol::RecordKind::stability_run);
    }
    if (!report) continue;
    q::GateRun run = q::gate_run_from_report(*report);
    if (!run.finished || run.passed) continue;
    const auto judged = q::apply_waivers(std::move(run), *waivers, risks, now);
    if (judged.texts.empty() || !record_again(judged.run, waiver.scope)) continue;
    say(fmt::format("run {} judged again: {}{}", waiver.scope, judged.run.passed ? "passed, " : "",
                    fmt::join(judged.texts, "; ")));
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
  for (const auto& report : *runs) {
    auto judged = q::judge_stability_run(q::gate_run_from_report(report), *waivers, risks, wall_now_ms());
    if (!judged) continue;
    const std::string run_id = judged->run.run_id;
    for (const auto& text : judged->waived) say(fmt::format("stability run {}: {}", run_id, text));
    RecordTicketSink sink(client, run_id, {ticket_sink_name(config.webhook_config)});
    for (const auto& ticket : judged->pages) {
      if (auto filed = sink.file(ticket); !filed) {
        say(fmt::format("stability run {}: could not page {} for {}: {}", run_id, ticket.team, ticket.title,
                        filed.error().message));
        return;  // judged again on the next poll; a ticket filed twice is kept once
      } else if (*filed == q::FileResult::filed) {
        say(fmt::format("stability run {}: paged {} ({}): {}", run_id, ticket.team, ticket.severity, ticket.title));
      }
    }
    if (auto ok = qs::record_run(client, run_id, q::to_json(judged->run), protocol::RecordKind::stability_run); !ok) {
      return say(fmt::format("stability run {}: could not record it judged: {}", run_id, ok.error().message));
    }
    waived.note(judged->run);
  }
  after_seq = seq;
}

}  // namespace kiln::qualifier
