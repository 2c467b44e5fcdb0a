#include "qualification/ci_metrics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "qualification/flake_budget.h"
#include "qualification/run_report.h"
#include "qualification/run_verdict.h"

namespace kiln::qualification {
namespace {

double seconds_from_ms(TimeMs ms) { return static_cast<double>(ms) / 1000.0; }

}  // namespace

CiMetrics::CiMetrics(FlakeBudgetOptions flake_budget) : flakes_(flake_budget) {}

void CiMetrics::add_request(const RunRequest& request, TimeMs requested_at_ms) {
  requests_[request.run_id] = Requested{request.tier, requested_at_ms, request.deadline_ms, 0};
  if (request.tier == Tier::nightly && request.deadline_ms != 0) latest_scheduled_nightly_ = request.run_id;
}

void CiMetrics::add_report(const nlohmann::json& report) {
  if (!report.is_object() || !report.contains("run_id") || !report["run_id"].is_string()) return;
  const std::string run_id = report["run_id"].get<std::string>();
  if (finished_.count(run_id) != 0) return;
  if (!report.value("finished", false)) {
    auto outline = report_outline_from_json(report);
    if (outline) running_[run_id] = std::move(outline->bisections_running);
    return;
  }
  running_.erase(run_id);
  finished_.insert(run_id);
  record_report_runs(flakes_, report);
  // A run is what someone asked for; a release's soak rounds, recorded under their own ids, are
  // part of it.
  const auto request = requests_.find(run_id);
  if (request == requests_.end()) return;
  const TimeMs finished_at_ms = report.value("finished_at_ms", TimeMs{0});
  request->second.finished_at_ms = finished_at_ms;
  runs_[{request->second.tier, run_verdict(report).word}] += 1;
  if (request->second.tier == Tier::smoke) {
    time_to_signal_.observe(seconds_from_ms(std::max<TimeMs>(0, finished_at_ms - request->second.requested_at_ms)));
  }
}

void CiMetrics::set_tickets(const std::vector<TicketRecord>& tickets) {
  tickets_by_team_.clear();
  for (const TicketRecord& record : tickets) tickets_by_team_[record.ticket.team] += 1;
}

std::vector<std::string> CiMetrics::unfinished_runs() const {
  std::set<std::string> runs;
  for (const auto& [run_id, request] : requests_) {
    if (finished_.count(run_id) == 0) runs.insert(run_id);
  }
  for (const auto& [run_id, bisections] : running_) runs.insert(run_id);
  return {runs.begin(), runs.end()};
}

std::string CiMetrics::render(TimeMs now_wall_ms) const {
  metrics::Exposition out;
  out.histogram("kiln_presubmit_time_to_signal_seconds",
                "From a presubmit smoke's request to its verdict, for every finished smoke run.");
  out.sample({}, time_to_signal_);

  const auto nightly = requests_.find(latest_scheduled_nightly_);
  const bool have_nightly = nightly != requests_.end();
  const bool nightly_finished = have_nightly && nightly->second.finished_at_ms != 0;
  out.gauge("kiln_nightly_deadline_timestamp_seconds", "The deadline of the latest scheduled nightly (Unix seconds).");
  if (have_nightly) out.sample({}, seconds_from_ms(nightly->second.deadline_ms));
  out.gauge("kiln_nightly_finish_timestamp_seconds",
            "When the latest scheduled nightly finished (Unix seconds); absent while it runs.");
  if (nightly_finished) out.sample({}, seconds_from_ms(nightly->second.finished_at_ms));
  out.gauge("kiln_nightly_late",
            "1 when the latest scheduled nightly finished after its deadline, or still runs past it; else 0.");
  const TimeMs end_ms = nightly_finished ? nightly->second.finished_at_ms : now_wall_ms;
  out.sample({}, have_nightly && end_ms > nightly->second.deadline_ms ? 1 : 0);

  out.counter("kiln_runs_total", "Finished qualification runs by kind (smoke, nightly, release) and verdict (passed; "
                                 "failed: a regression; error: the run could not be carried out).");
  for (Tier tier : enum_values<Tier>()) {
    for (const char* verdict : {"passed", "failed", "error"}) {
      const auto it = runs_.find({tier, verdict});
      out.sample({{"kind", std::string(to_string(tier))}, {"verdict", verdict}}, it == runs_.end() ? 0 : it->second);
    }
  }

  out.gauge("kiln_test_flake_ratio",
            "Flaky verdicts over runs of each test (model) in the flake budget's window, with its owning team.");
  for (const FlakeBudgetStatus& status : flakes_.statuses(now_wall_ms)) {
    out.sample({{"test", status.test}, {"owner", status.owner_team}}, status.flake_rate);
  }

  // One series per run and model: a model bisected on two revisions at once shows the one further on.
  std::map<std::pair<std::string, std::string>, double> rounds;
  std::size_t running = 0;
  for (const auto& [run_id, bisections] : running_) {
    for (const BisectionProgress& b : bisections) {
      ++running;
      double& r = rounds[{run_id, b.model}];
      r = std::max(r, static_cast<double>(b.rounds));
    }
  }
  out.gauge("kiln_bisections_running", "Bisections under way in the runs not finished.");
  out.sample({}, static_cast<double>(running));
  out.gauge("kiln_bisection_rounds", "Probe rounds so far of each bisection under way, by run and regressed model.");
  for (const auto& [key, count] : rounds) out.sample({{"run", key.first}, {"model", key.second}}, count);

  out.counter("kiln_tickets_filed_total", "Tickets filed by the runs, by the team they were filed to.");
  for (const auto& [team, count] : tickets_by_team_) out.sample({{"team", team}}, count);
  return out.text();
}

}  // namespace kiln::qualification
