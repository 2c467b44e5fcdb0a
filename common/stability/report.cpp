#include "common/stability/report.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::stability {

nlohmann::json rank_section(const StabilityMonitor& monitor, std::uint32_t chips, double run_hours) {
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& f : monitor.failures()) failures.push_back(to_json(f));
  return {{"chips", chips},
          {"steps", monitor.last_step()},
          {"run_hours", run_hours},
          {"chip_hours", chips * run_hours},
          {"ended_early", monitor.ended()},
          {"first_window_throughput", monitor.first_window_throughput()},
          {"latest_window_throughput", monitor.latest_window_throughput()},
          {"failures", failures}};
}

Result<RankRun> rank_run_from_result(const nlohmann::json& result) {
  const auto bad = [](std::string_view what) {
    return fail(Errc::bad_message,
                fmt::format("the workload result's stability object {}; the workload must write it as "
                            "docs/workloads.md says",
                            what));
  };
  if (!result.is_object() || !result.contains("stability") || !result["stability"].is_object()) {
    return bad("is missing");
  }
  const nlohmann::json& s = result["stability"];
  RankRun run;
  if (!s.contains("chips") || !s["chips"].is_number_unsigned()) return bad("lacks chips");
  if (!s.contains("steps") || !s["steps"].is_number_unsigned()) return bad("lacks steps");
  if (!s.contains("run_hours") || !s["run_hours"].is_number() || s["run_hours"].get<double>() < 0) {
    return bad("lacks run_hours");
  }
  if (!s.contains("failures") || !s["failures"].is_array()) return bad("lacks failures");
  run.chips = s["chips"].get<std::uint32_t>();
  run.steps = s["steps"].get<std::uint64_t>();
  run.run_hours = s["run_hours"].get<double>();
  run.ended_early = s.value("ended_early", false);
  run.first_window_throughput = s.value("first_window_throughput", 0.0);
  run.latest_window_throughput = s.value("latest_window_throughput", 0.0);
  for (const auto& f : s["failures"]) {
    auto failure = failure_from_json(f);
    if (!failure) return tl::unexpected(failure.error());
    run.failures.push_back(*failure);
  }
  if (result.contains("job") && result["job"].is_object()) {
    run.node_id = result["job"].value("node_id", "");
    if (result["job"].contains("rank") && result["job"]["rank"].is_number_unsigned()) {
      run.rank = result["job"]["rank"].get<std::uint32_t>();
    }
  }
  run.reported = true;
  return run;
}

std::vector<Episode> episodes_of(const std::vector<RankRun>& ranks) {
  std::vector<Episode> episodes;
  for (const auto& r : ranks) {
    for (const auto& f : r.failures) {
      const auto same = std::find_if(episodes.begin(), episodes.end(), [&](const Episode& e) {
        return e.kind == f.kind && e.rank == r.rank && e.job_id == r.job_id && e.node_id == r.node_id &&
               e.chip == f.chip;
      });
      if (same == episodes.end()) {
        episodes.push_back({f.kind, r.rank, r.job_id, r.node_id, f.chip, 1, f.step, f.step, f.time_s, f.time_s});
        continue;
      }
      ++same->occurrences;
      same->first_step = std::min(same->first_step, f.step);
      same->last_step = std::max(same->last_step, f.step);
      same->first_time_s = std::min(same->first_time_s, f.time_s);
      same->last_time_s = std::max(same->last_time_s, f.time_s);
    }
  }
  return episodes;
}

StabilityReport make_report(std::string model, std::uint32_t chips, double hours_asked,
                            const StabilityCriteria& criteria, std::vector<RankRun> ranks) {
  StabilityReport report;
  report.model = std::move(model);
  report.chips = chips;
  report.hours_asked = hours_asked;
  report.criteria = criteria;
  report.ranks = std::move(ranks);
  report.complete = !report.ranks.empty();
  for (const auto& r : report.ranks) {
    report.chip_hours += r.chip_hours();
    report.complete = report.complete && r.reported;
    report.occurrences += r.failures.size();
  }
  report.episodes = episodes_of(report.ranks);
  // No exposure at all (every rank hung at once): the rate's denominator is the smallest
  // measurable one, so the report still says how many failures there were.
  const double exposure = report.chip_hours > 0 ? report.chip_hours : 1e-9;
  for (const FailureKind kind : enum_values<FailureKind>()) {
    std::uint64_t episodes = 0;
    std::uint64_t occurrences = 0;
    for (const auto& e : report.episodes) {
      if (e.kind != kind) continue;
      ++episodes;
      occurrences += e.occurrences;
    }
    report.kinds.push_back({kind, occurrences, failure_rate(episodes, exposure, criteria.confidence)});
  }
  report.total = failure_rate(report.episodes.size(), exposure, criteria.confidence);
  report.passed = report.complete && report.occurrences == 0;
  return report;
}

namespace {

nlohmann::json rate_json(std::uint64_t occurrences, const RateEstimate& rate) {
  return {{"episodes", rate.count},
          {"failures", occurrences},
          {"per_1000_chip_hours", rate.per_1000_chip_hours},
          {"lower", rate.lower},
          {"upper", rate.upper}};
}

}  // namespace

nlohmann::json to_json(const StabilityReport& report) {
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& k : report.kinds) kinds[std::string(enum_name(k.kind))] = rate_json(k.occurrences, k.rate);
  nlohmann::json episodes = nlohmann::json::array();
  for (const auto& e : report.episodes) {
    episodes.push_back({{"kind", enum_name(e.kind)},
                        {"rank", e.rank},
                        {"job_id", e.job_id},
                        {"node_id", e.node_id},
                        {"chip", e.chip ? nlohmann::json(*e.chip) : nlohmann::json(nullptr)},
                        {"occurrences", e.occurrences},
                        {"first_step", e.first_step},
                        {"last_step", e.last_step},
                        {"first_time_s", e.first_time_s},
                        {"last_time_s", e.last_time_s}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& r : report.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"job_id", r.job_id},
                     {"node_id", r.node_id},
                     {"reported", r.reported},
                     {"problem", r.problem},
                     {"chips", r.chips},
                     {"steps", r.steps},
                     {"run_hours", r.run_hours},
                     {"chip_hours", r.chip_hours()},
                     {"ended_early", r.ended_early},
                     {"first_window_throughput", r.first_window_throughput},
                     {"latest_window_throughput", r.latest_window_throughput}});
    for (const auto& f : r.failures) {
      nlohmann::json entry = to_json(f);
      entry["rank"] = r.rank;
      entry["job_id"] = r.job_id;
      entry["node_id"] = r.node_id;
      failures.push_back(std::move(entry));
    }
  }
  return {{"schema", "kiln.stability-run/1"},
          {"model", report.model},
          {"chips", report.chips},
          {"hours_asked", report.hours_asked},
          {"criteria", criteria_to_json(report.criteria)},
          {"chip_hours", report.chip_hours},
          {"confidence", report.criteria.confidence},
          {"total", rate_json(report.occurrences, report.total)},
          {"kinds", kinds},
          {"episodes", episodes},
          {"failures", failures},
          {"ranks", ranks},
          {"complete", report.complete},
          {"passed", report.passed}};
}

std::string to_text(const StabilityReport& report) {
  std::string out = fmt::format("stability run of {} on {} chips, {} h asked: {:.1f} chip-hours run\n", report.model,
                                report.chips, report.hours_asked, report.chip_hours);
  const auto line = [&](std::string_view name, std::uint64_t occurrences, const RateEstimate& rate) {
    out += fmt::format("  {:<17} {:>4} episode{} {:>5} failures  {:>9.2f} per 1000 chip-hours  ({:.0f}% CI {:.2f} to "
                       "{:.2f})\n",
                       name, rate.count, rate.count == 1 ? " " : "s", occurrences, rate.per_1000_chip_hours,
                       100 * report.criteria.confidence, rate.lower, rate.upper);
  };
  for (const auto& k : report.kinds) line(enum_name(k.kind), k.occurrences, k.rate);
  line("total", report.occurrences, report.total);
  for (const auto& e : report.episodes) {
    if (e.occurrences < 2) continue;
    out += fmt::format("  episode: {} on {} rank {}{} fired {} times, steps {} to {}: one cause, counted once\n",
                       enum_name(e.kind), e.node_id, e.rank, e.chip ? fmt::format(" chip {}", *e.chip) : "",
                       e.occurrences, e.first_step, e.last_step);
  }
  for (const auto& r : report.ranks) {
    if (!r.reported) {
      out += fmt::format("  rank {} (job {}, {}): no report: {}\n", r.rank, r.job_id,
                         r.node_id.empty() ? "no node" : r.node_id, r.problem);
      continue;
    }
    for (const auto& f : r.failures) {
      out += fmt::format("  {} on {} rank {} (job {}){} at step {}, {:.1f} min: {}\n", enum_name(f.kind), r.node_id,
                         r.rank, r.job_id, f.chip ? fmt::format(" chip {}", *f.chip) : "", f.step, f.time_s / 60,
                         f.detail);
    }
  }
  out += report.passed     ? "PASSED: no failure\n"
         : report.complete ? fmt::format("FAILED: {} failure{} in {} episode{}\n", report.occurrences,
                                         report.occurrences == 1 ? "" : "s", report.total.count,
                                         report.total.count == 1 ? "" : "s")
                           : "FAILED: not every rank reported\n";
  return out;
}

nlohmann::json rate_to_json(std::uint64_t episodes, double chip_hours, double confidence) {
  const RateEstimate rate = failure_rate(episodes, chip_hours, confidence);
  return {{"schema", "kiln.stability-rate/1"},
          {"episodes", episodes},
          {"chip_hours", chip_hours},
          {"confidence", confidence},
          {"per_1000_chip_hours", rate.per_1000_chip_hours},
          {"lower", rate.lower},
          {"upper", rate.upper}};
}

std::string rate_to_text(std::uint64_t episodes, double chip_hours, double confidence) {
  const RateEstimate rate = failure_rate(episodes, chip_hours, confidence);
  return fmt::format("{} episode{} in {:g} chip-hours: {:.2f} per 1000 chip-hours ({:.0f}% CI {:.2f} to {:.2f})\n",
                     episodes, episodes == 1 ? "" : "s", chip_hours, rate.per_1000_chip_hours, 100 * confidence,
                     rate.lower, rate.upper);
}

}  // namespace kiln::stability
