#include "qualification/run_report.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "qualification/junit.h"
#include "qualification/run_evidence.h"
#include "qualification/run_verdict.h"

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

// A bundle as a report shows it: its versions, and of its changes how many and the last. Never a
// change list: a bundle recorded as kiln.bundle/1 lists every change since the start, and a
// report holding such lists (the candidate and each revision's baseline) outgrew a record within
// weeks of history.
json bundle_summary_json(const Bundle& bundle) {
  json summary = to_json(bundle);
  summary.erase("changes");
  summary.erase("schema");
  summary["change_count"] = bundle.change_count;
  summary["last_change"] = bundle.last_change;
  return summary;
}

json measured_job_json(const MeasuredJob& job) {
  json entry = {{"job_id", job.job_id},
                {"submission", json::parse(job.submission)},
                {"eval_threshold", job.eval_threshold},
                {"nodes", job.nodes()}};
  if (!job.rank_job_ids.empty()) entry["rank_job_ids"] = job.rank_job_ids;
  return entry;
}

Result<MeasuredJob> measured_job_from_json(const json& entry) {
  if (!entry.is_object() || !entry.contains("submission") || !entry.at("submission").is_object()) {
    return fail(Errc::bad_message, "a model's measure_job must be an object with the job's submission");
  }
  MeasuredJob job{entry.at("job_id").get<std::uint64_t>(), entry.at("submission").dump(),
                  entry.at("eval_threshold").get<double>(), {}};
  // Reports from before gangs were recorded have no ranks: they measured on one node.
  if (entry.contains("rank_job_ids")) job.rank_job_ids = entry.at("rank_job_ids").get<std::vector<std::uint64_t>>();
  return job;
}

// The counts per verdict (reruns still running are `pending`) and every rerun.
json reproducibility_json(const std::vector<ReproductionReport>& reruns) {
  std::map<std::string, std::size_t> counts = {
      {"reproduced", 0}, {"not_reproduced", 0}, {"inconclusive", 0}, {"pending", 0}};
  json entries = json::array();
  for (const ReproductionReport& r : reruns) {
    ++counts[r.check ? std::string(to_string(r.check->verdict)) : "pending"];
    json entry = {{"run_id", r.run_id},     {"model", r.model},
                  {"revision", r.revision}, {"job_id", r.job_id},
                  {"rerun_job_id", r.rerun_job_id}};
    entry["verdict"] = r.check ? to_string(r.check->verdict) : "pending";
    entry["gate"] = r.check ? r.check->gate : "";
    entry["detail"] = r.check ? r.check->detail : "";
    entry["performance"] = r.check && r.check->performance ? to_json(*r.check->performance) : json(nullptr);
    entries.push_back(std::move(entry));
  }
  return {{"sampled", reruns.size()}, {"counts", counts}, {"jobs", std::move(entries)}};
}

std::string reproducibility_text(const std::vector<ReproductionReport>& reruns) {
  if (reruns.empty()) return "";
  std::map<std::string, std::size_t> counts;
  for (const ReproductionReport& r : reruns) ++counts[r.check ? std::string(to_string(r.check->verdict)) : "pending"];
  std::vector<std::string> parts;
  for (const auto& [verdict, count] : counts) parts.push_back(fmt::format("{} {}", count, verdict));
  std::string out = fmt::format("  reproducibility: {} earlier result{} rerun: {}\n", reruns.size(),
                                reruns.size() == 1 ? "" : "s", fmt::join(parts, ", "));
  for (const ReproductionReport& r : reruns) {
    out += fmt::format("    job {} ({} on revision {}, run {}) rerun as job {}: {}{}\n", r.job_id, r.model, r.revision,
                       r.run_id, r.rerun_job_id, r.check ? to_string(r.check->verdict) : "pending",
                       r.check ? ": " + r.check->detail : "");
  }
  return out;
}

}  // namespace

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
                  {"node_backends", m.node_backends},
                  {"duration_ms", m.duration_ms}};
    entry["performance"] = m.performance ? to_json(*m.performance) : json(nullptr);
    entry["triage"] = m.triage ? to_json(*m.triage) : json(nullptr);
    entry["bisection"] = m.bisection ? to_json(*m.bisection) : json(nullptr);
    entry["training"] = m.training ? to_json(*m.training) : json(nullptr);
    entry["measure_job"] = m.measure_job ? measured_job_json(*m.measure_job) : json(nullptr);
    models.push_back(std::move(entry));
  }
  json tickets = json::array();
  for (const Ticket& t : report.tickets) tickets.push_back(json::parse(to_json_text(t)));
  json bisections = json::array();
  for (const BisectionProgress& b : report.bisections_running) {
    bisections.push_back(
        {{"model", b.model}, {"revision", b.revision}, {"rounds", b.rounds}, {"probes_started", b.probes_started}});
  }
  std::map<std::string, std::size_t> counts;
  for (const ModelReport& m : report.models) ++counts[std::string(to_string(m.verdict))];
  json in_flight = json::array();
  for (const JobInFlight& job : report.jobs_in_flight) {
    in_flight.push_back({{"job_id", job.job_id},
                         {"lease_id", job.lease_id},
                         {"model", job.model},
                         {"revision", job.revision},
                         {"purpose", to_string(job.purpose)}});
  }
  json baseline_bundles = json::object();
  for (const auto& [revision, bundle] : report.baseline_bundles) {
    baseline_bundles[revision] = bundle_summary_json(bundle);
  }
  json document = {{"schema", "kiln.qualification-run/1"},
                   {"run_id", report.run_id},
                   {"tier", to_string(report.tier)},
                   {"candidate_bundle_id", report.candidate_bundle_id},
                   {"baseline_bundle_ids", report.baseline_bundle_ids},
                   {"candidate_bundle",
                    report.candidate_bundle ? bundle_summary_json(*report.candidate_bundle) : json(nullptr)},
                   {"baseline_bundles", std::move(baseline_bundles)},
                   {"finished", report.finished},
                   {"passed", report.passed},
                   {"started_at_ms", report.started_at_ms},
                   {"finished_at_ms", report.finished_at_ms},
                   {"jobs_started", report.jobs_started},
                   {"verdict_counts", counts},
                   {"models", std::move(models)},
                   {"tickets", std::move(tickets)},
                   {"reproducibility", reproducibility_json(report.reproducibility)},
                   {"jobs_in_flight", std::move(in_flight)},
                   {"bisections_running", std::move(bisections)}};
  if (report.soak) document["soak"] = {{"rounds_asked", report.soak->asked}, {"rounds_run", report.soak->run}};
  return document;
}

std::string summary_text(const RunReport& report) {
  // The run's verdict as every reader shows it (run_verdict.h), failures in capitals.
  const std::string verdict = run_verdict(to_json(report)).word;
  std::string out = fmt::format("kiln {} {}: {} (candidate {})\n", to_string(report.tier), report.run_id,
                                verdict == "failed"  ? "FAILED"
                                : verdict == "error" ? "ERROR"
                                                     : verdict,
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
  if (report.soak) out += fmt::format("  soak: {} of {} rounds run\n", report.soak->run, report.soak->asked);
  for (const Ticket& t : report.tickets) {
    out += fmt::format("  ticket {} to {}: {} ({})\n", t.id, t.team, t.title, to_string(t.kind));
  }
  return out + reproducibility_text(report.reproducibility);
}

std::string to_junit_xml(const RunReport& report) {
  using Outcome = JunitCase::Outcome;
  const std::string classname = fmt::format("kiln.{}", to_string(report.tier));
  std::vector<JunitSuite> suites;
  for (const ModelReport& m : report.models) {
    auto suite = std::find_if(suites.begin(), suites.end(), [&](const JunitSuite& s) { return s.name == m.revision; });
    if (suite == suites.end()) suite = suites.insert(suites.end(), JunitSuite{m.revision, {}});
    JunitCase c{m.model, classname, m.duration_ms, Outcome::passed, "", "", ""};
    if (m.verdict == ModelVerdict::skipped) {
      c.outcome = Outcome::skipped;
      c.message = m.detail;
    } else if (m.verdict == ModelVerdict::error) {
      // Not measured: an <error>, which CI shows apart from a model that failed.
      c.outcome = Outcome::error;
      c.message = fmt::format("could not be measured: {}", m.detail);
    } else if (fails_run(m.verdict) && m.waived.empty()) {
      c.outcome = Outcome::failed;
      c.message = fmt::format("{}: {}", to_string(m.verdict), m.detail);
      c.type = std::string(to_string(m.verdict));
    }
    c.system_out = fmt::format("verdict: {}\nowner: {}\n", to_string(m.verdict), m.owner_team);
    if (!m.ticket_ids.empty()) c.system_out += fmt::format("tickets: {}\n", fmt::join(m.ticket_ids, ", "));
    if (!m.nodes.empty()) c.system_out += fmt::format("nodes: {}\n", fmt::join(m.nodes, ", "));
    for (const auto& waiver : m.waived) c.system_out += fmt::format("{}\n", waiver);
    suite->cases.push_back(std::move(c));
  }
  for (JunitSuite& suite : suites) suite.name = fmt::format("{} revision {}", classname, suite.name);
  return junit_xml(fmt::format("{} {}", classname, report.run_id), suites);
}

int gate_rounds(const nlohmann::json& model_entry) {
  const auto performance = model_entry.find("performance");
  if (performance == model_entry.end() || !performance->is_object()) return 1;
  auto count = [&](const char* key) {
    const auto it = performance->find(key);
    return it != performance->end() && it->is_number_integer() ? std::max(it->get<int>(), 0) : 0;
  };
  int rounds = 1 + count("initial_extra_rounds");
  const auto confirmation = performance->find("confirmation");
  if (confirmation != performance->end() && !confirmation->is_null()) rounds += 1 + count("confirmation_extra_rounds");
  return rounds;
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
      // Reports recorded before backends were kept with results have none.
      if (entry.contains("node_backends")) {
        m.node_backends = entry.at("node_backends").get<std::map<std::string, std::string>>();
      }
      m.duration_ms = entry.at("duration_ms").get<DurationMs>();
      // Reports recorded before measure jobs were kept have none.
      if (entry.contains("measure_job") && !entry.at("measure_job").is_null()) {
        auto job = measured_job_from_json(entry.at("measure_job"));
        if (!job) return tl::unexpected(job.error());
        m.measure_job = std::move(*job);
      }
      // A model run a waiver let through (recorded by the qualifier; waiver.h).
      if (entry.contains("waivers")) {
        for (const auto& waiver : entry.at("waivers")) m.waived.push_back(waiver.at("text").get<std::string>());
      }
      report.models.push_back(std::move(m));
    }
    if (document.contains("reproducibility")) {
      for (const auto& entry : document.at("reproducibility").at("jobs")) {
        ReproductionReport r{entry.at("run_id").get<std::string>(), entry.at("model").get<std::string>(),
                             entry.at("revision").get<std::string>(), entry.at("job_id").get<std::uint64_t>(),
                             entry.at("rerun_job_id").get<std::uint64_t>(), std::nullopt};
        if (auto verdict = enum_from_name<Reproduction>(entry.at("verdict").get<std::string>())) {
          r.check = ReproductionCheck{*verdict, entry.at("gate").get<std::string>(),
                                      entry.at("detail").get<std::string>(), std::nullopt};
        }
        report.reproducibility.push_back(std::move(r));
      }
    }
    // Reports recorded before bisections were followed have none.
    if (document.contains("bisections_running")) {
      for (const auto& entry : document.at("bisections_running")) {
        report.bisections_running.push_back({entry.at("model").get<std::string>(), entry.at("revision").get<std::string>(),
                                             entry.at("rounds").get<std::size_t>(),
                                             entry.at("probes_started").get<std::size_t>()});
      }
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
