#include "qualifier/requested_run.h"

#include <algorithm>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "qualification/flake_budget.h"
#include "qualification/risk_status.h"
#include "qualification/run.h"
#include "qualification/run_report.h"
#include "qualification/run_service.h"
#include "qualification/run_verdict.h"
#include "qualification/shell/bundle_builder.h"
#include "qualification/shell/fleet_check.h"
#include "qualification/shell/reproduction.h"
#include "qualification/shell/run_driver.h"
#include "qualification/shell/unit_runner.h"
#include "qualification/unit_tier.h"
#include "qualification/waiver.h"
#include "qualifier/qualifier_log.h"
#include "qualifier/run_claim.h"
#include "qualifier/run_facts.h"
#include "qualifier/run_pages.h"
#include "qualifier/ticket_sinks.h"

namespace kiln::qualifier {
namespace {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

// A report as recorded: `finished` only once every stage after it (soak rounds, flake tickets,
// the new baselines) is done too, so a client following the run sees its verdict last. A
// scheduled nightly's report carries its deadline and, once finished, whether it met it.
nlohmann::json recorded(q::RunReport report, bool finished, const q::RunRequest& request) {
  report.finished = report.finished && finished;
  nlohmann::json document = q::to_json(report);
  std::string summary = q::summary_text(report);
  if (request.deadline_ms != 0) {
    document["deadline_ms"] = request.deadline_ms;
    if (const auto met = q::met_deadline(request, report)) {
      document["met_deadline"] = *met;
      summary += fmt::format("  deadline {} UTC {}\n", q::utc_time_of_day(request.deadline_ms), *met ? "met" : "MISSED");
    }
  }
  document["summary"] = std::move(summary);
  return document;
}

// One requested run from its request to its finished report (drive_requested_run).
class RequestedRun {
 public:
  RequestedRun(const QualifierConfig& config, const Setup& setup, SharedRecords& shared, q::RunRequest request,
               std::string owner, const std::atomic<bool>& stop)
      : config_(config), set_(setup.set), risks_(setup.risks), waived_(shared.waived), recent_(shared.recent),
        changes_(shared.changes), cancels_(shared.cancels), request_(std::move(request)), owner_(std::move(owner)),
        stop_(stop), lines_(request_.run_id), out_(&lines_), pages_(config_.reports_dir, recent_, out_) {}

  Status drive() {
    auto client = connect(config_);
    if (!client) return tl::unexpected(client.error());
    cli::Client& c = **client;
    Claim claim(c, config_, request_.run_id, owner_);
    auto driven = drive_claimed(c, claim);
    if (const std::string who = cancels_.by(request_.run_id); !driven && !who.empty()) {
      return end_in_error(c, "cancelled by " + who, who);
    }
    if (driven || driven_again_after(driven.error()) || stop_.load()) return driven;
    return end_in_error(c, "cannot run: " + driven.error().message);
  }

 private:
  Status drive_claimed(cli::Client& c, Claim& claim) {
    if (const std::string who = cancels_.by(request_.run_id); !who.empty()) {
      return fail(Errc::conflict, "cancelled by " + who + " before it started");
    }
    pages_.read_other_runs(c);
    auto facts = gather_facts(c, request_, set_, changes_);
    if (!facts) return tl::unexpected(facts.error());
    for (const auto& revision : q::revisions_skipped(facts->candidate, facts->fleet_revisions)) {
      out_ << fmt::format("no node of revision {} is registered; the run skips it\n", revision);
    }
    // A request that cannot be carried out is refused before the unit tier spends anything on it.
    auto input = q::run_input_for(request_, *facts);
    if (!input) return unrunnable(c, input.error());
    if (auto ok = qs::check_stack_files(*input, config_.bundle_dir); !ok) return unrunnable(c, ok.error());
    if (request_.tier == q::Tier::smoke) {
      auto gate = unit_gate(*facts);
      if (!gate) return unrunnable(c, gate.error());
      if (!gate->admitted) return finish_without_jobs(c, gate->reason);
    }
    RecordTicketSink sink(c, request_.run_id, {ticket_sink_name(config_.webhook_config)});
    auto builder = qs::make_configured_builder(config_.builder, config_.builder_args, config_.bundle_dir,
                                               facts->candidate.hardware_revisions);
    qs::DriverOptions options;
    options.bundle_dir = config_.bundle_dir;
    options.golden_dir = config_.golden_dir;
    options.artifacts = config_.artifacts_by_digest ? qs::ArtifactMode::digest : qs::ArtifactMode::shared_mount;
    options.progress = &out_;
    options.stop = &stop_;
    options.may_continue = [&claim] { return claim.keep(); };
    options.cancelled_by = [this] { return cancels_.by(request_.run_id); };

    auto whole = drive_stage(c, *input, sink, *builder, options, /*last=*/false);
    if (!whole) return tl::unexpected(whole.error());
    if (request_.tier == q::Tier::release) whole->soak = q::SoakRounds{request_.soak_rounds, 0};
    for (std::uint32_t round = 0; auto soak = q::next_soak_round(request_, *input, *whole, round);) {
      out_ << fmt::format("stability soak round {} of {}\n", round + 1, request_.soak_rounds);
      auto soaked = drive_stage(c, *soak, sink, *builder, options, /*last=*/true);
      if (!soaked) return tl::unexpected(soaked.error());
      q::add_soak_round(*whole, *soaked, ++round);
    }
    if (request_.tier == q::Tier::nightly && config_.reproducibility_sample > 0) {
      if (auto ok = rerun_sample(c, *facts, *input, options, *whole); !ok) return ok;
    }
    // A slow node passes every comparison above (each on its own chips): the fleet check sets its
    // nodes side by side.
    std::optional<qs::FleetCheckReport> fleet;
    if (request_.tier == q::Tier::nightly && config_.fleet_check_models > 0) {
      const qs::FleetCheckSettings settings{config_.fleet_check_models, config_.fleet_outliers,
                                            config_.fleet_check_wait_ms};
      auto checked = qs::check_fleet_speed(c, *whole, set_, settings, options, sink, wall_now_ms());
      if (!checked) return tl::unexpected(checked.error());
      fleet = std::move(*checked);
    }
    file_flake_tickets(c, *whole, sink);
    const auto accepted = q::revisions_to_accept(request_, *input, *whole);
    for (const auto& revision : accepted) {
      if (auto ok = qs::accept_baseline(c, {revision, input->candidate.id, request_.run_id, wall_now_ms()}); !ok) {
        return ok;
      }
    }
    if (!accepted.empty()) {
      out_ << fmt::format("bundle {} is now the baseline of {}\n", input->candidate.id.substr(0, 12),
                          fmt::join(accepted, ", "));
    }
    pages_.read_other_runs(c);
    nlohmann::json document = recorded(*whole, true, request_);
    if (fleet) qs::add_fleet_check(document, *fleet);
    const q::GateRun judged = judge_risks(c, q::gate_run_from_report(document), sink);
    if (auto ok = record(c, request_.run_id, q::to_json(judged)); !ok) return ok;
    waived_.note(judged);
    out_ << (whole->passed ? "passed\n" : judged.passed ? "passed with waivers\n" : "FAILED\n");
    return {};
  }

  // `last`: its report is whole when it finishes (a soak round's own record).
  Result<q::RunReport> drive_stage(cli::Client& client, const q::RunInput& input, q::TicketSink& sink,
                                   qs::BundleBuilder& builder, qs::DriverOptions options, bool last) {
    auto run = q::QualificationRun::start(q::RunInput(input), wall_now_ms());
    if (!run) return tl::unexpected(run.error());
    out_ << fmt::format("{} of bundle {} on revision{} {}, {} model runs\n", q::to_string(input.settings.tier),
                        input.candidate.id.substr(0, 12), input.settings.revisions.size() == 1 ? "" : "s",
                        fmt::join(input.settings.revisions, ", "), run->report().models.size());
    options.record = [&client, this, last](const q::RunReport& report) {
      if (auto ok = record(client, report.run_id, recorded(report, last, request_)); !ok) {
        out_ << "could not record the run's progress on the coordinator: " << ok.error().message << "\n";
      }
    };
    return qs::drive_run(client, *run, set_, input.history, builder, sink, options);
  }

  // The nightly's reproducibility sample (run_service.h reproducibility_sample): earlier results
  // rerun and checked, reported with the run and never part of its verdict.
  Status rerun_sample(cli::Client& client, const q::RunFacts& facts, const q::RunInput& input,
                      const qs::DriverOptions& options, q::RunReport& whole) {
    // The kLookbackMs before this run started.
    const TimeMs since_ms = whole.started_at_ms - kLookbackMs;
    const auto older = [since_ms](const nlohmann::json& report) {
      return report.value("started_at_ms", TimeMs{0}) < since_ms;
    };
    auto runs = qs::list_latest_runs(client, older);
    if (!runs) return tl::unexpected(runs.error());
    std::vector<q::RunReport> earlier;
    for (const auto& document : *runs) {
      if (auto outline = q::report_outline_from_json(document)) earlier.push_back(std::move(*outline));
    }
    const auto picks = q::reproducibility_sample(earlier, request_.run_id, set_, facts.fleet_revisions,
                                                 config_.reproducibility_sample, input.settings.seed);
    if (picks.empty()) {
      out_ << "reproducibility: no earlier result of a model in the set on a revision the fleet has\n";
      return {};
    }
    out_ << fmt::format("reproducibility: rerunning {} earlier result{}\n", picks.size(), picks.size() == 1 ? "" : "s");
    const auto record_progress = [&](const std::vector<q::ReproductionReport>& so_far) {
      whole.reproducibility = so_far;
      if (auto ok = record(client, request_.run_id, recorded(whole, false, request_)); !ok) {
        out_ << "could not record the run's progress on the coordinator: " << ok.error().message << "\n";
      }
    };
    auto reruns = qs::rerun_sample(client, picks, request_.run_id, input.settings.perf, input.settings.seed, options,
                                   record_progress);
    if (!reruns) return tl::unexpected(reruns.error());
    whole.reproducibility = std::move(*reruns);
    return {};
  }

  // The risk register's word on the finished run: the waivers in force let their failures through
  // (the report shows each), then every risk gate still failing pages once, the owner its triage
  // names (risk_status.h): a failure the run ticketed already is not paged again.
  // Without the waivers (the coordinator did not list them) the run stays failed: a waiver is
  // never assumed. Returns the run as judged.
  q::GateRun judge_risks(cli::Client& client, q::GateRun run, q::TicketSink& sink) {
    const TimeMs now = wall_now_ms();
    if (auto waivers = qs::list_waivers(client); !waivers) {
      out_ << "could not list the waivers; none is applied: " << waivers.error().message << "\n";
    } else {
      auto waived = q::apply_waivers(std::move(run), *waivers, risks_, now);
      for (const auto& text : waived.texts) out_ << text << "\n";
      run = std::move(waived.run);
    }
    for (const auto& page : q::risk_gate_pages(risks_, run, now)) {
      if (!page.ticket) {
        out_ << q::page_text(page) << "\n";
      } else if (auto filed = sink.file(*page.ticket); !filed) {
        out_ << fmt::format("could not page {} for {}: {}\n", page.ticket->team, page.ticket->title,
                            filed.error().message);
      } else if (*filed == q::FileResult::filed) {
        out_ << q::page_text(page) << "\n";
      }
    }
    return run;
  }

  // Every flaky test over its budget, counting this run, gets a ticket to its owner (once).
  void file_flake_tickets(cli::Client& client, const q::RunReport& whole, q::TicketSink& sink) {
    if (auto ok = recent_.refresh(client); !ok) {
      out_ << "could not read the other runs; flake budgets are checked on the next run: " << ok.error().message
           << "\n";
      return;
    }
    q::FlakeLedger ledger = recent_.flake_ledger();
    q::record_report_runs(ledger, recorded(whole, true, request_));
    for (const auto& ticket : q::flake_budget_tickets(ledger, wall_now_ms())) {
      if (auto filed = sink.file(ticket); filed && *filed == q::FileResult::filed) {
        out_ << fmt::format("ticket {} to {}: {}\n", ticket.id, ticket.team, ticket.title);
      }
    }
  }

  // The gate before a hardware smoke (unit_tier.h admit_smoke): the change's unit tier runs here,
  // on this host's CPU and simulated chip, before any job is submitted.
  Result<q::SmokeAdmission> unit_gate(const q::RunFacts& facts) {
    const std::string change_id = !request_.change.empty() ? request_.change : facts.candidate.last_change;
    auto change = std::find_if(facts.history.begin(), facts.history.end(),
                               [&](const q::Change& c) { return c.id == change_id; });
    // An unknown change is run_input_for's to refuse, with its own message.
    if (change == facts.history.end() || !q::is_hardware_path(change->layer)) return q::SmokeAdmission{true, ""};
    qs::UnitTierSetup setup = qs::default_unit_tier_setup();
    if (!config_.sim_driver.empty()) setup.sim_library = config_.sim_driver;
    if (!config_.cpu_driver.empty()) setup.cpu_library = config_.cpu_driver;
    auto unit = qs::run_unit_tier(facts.candidate, facts.history, change_id, setup);
    if (!unit) return tl::unexpected(unit.error());
    out_ << q::unit_summary_text(*unit);
    return q::admit_smoke(*change, *unit);
  }

  // The report on the coordinator (under its run id: a soak round has its own), then its pages.
  // Recorded every few seconds while the run goes: only its model runs that changed are put again.
  Status record(cli::Client& client, const std::string& run_id, const nlohmann::json& document) {
    if (auto ok = recorder_.record(client, run_id, document); !ok) return ok;
    pages_.write(document);
    return {};
  }

  // A run that cannot start (its change unknown, no node of its revisions, a stack file missing):
  // refused with the error verdict, its summary saying why, so whoever waits for it learns it.
  Status unrunnable(cli::Client& client, const Error& error) {
    return end_in_error(client, "cannot run: " + error.message);
  }

  // A run that cannot be carried out, or was cancelled: its report as far as it got (no model
  // before its first job), finished with the error verdict and why (run_verdict.h).
  Status end_in_error(cli::Client& client, const std::string& why, const std::string& cancelled_by = "") {
    out_ << why << "\n";
    auto earlier = qs::get_run(client, request_.run_id);
    nlohmann::json document = earlier ? std::move(*earlier) : recorded(report_without_jobs(), true, request_);
    q::end_with_error(document, why, cancelled_by, wall_now_ms());
    return record(client, request_.run_id, document);
  }

  q::RunReport report_without_jobs() const {
    q::RunReport report;
    report.run_id = request_.run_id;
    report.tier = request_.tier;
    report.candidate_bundle_id = request_.bundle_id;
    report.finished = true;
    report.started_at_ms = report.finished_at_ms = wall_now_ms();
    return report;
  }

  // The unit tier refused the run's change: finished, failed, its summary saying why.
  Status finish_without_jobs(cli::Client& client, const std::string& why) {
    out_ << why << "\n";
    const q::RunReport report = report_without_jobs();
    nlohmann::json document = recorded(report, true, request_);
    document["summary"] = fmt::format("kiln {} {}: FAILED (candidate {})\n  {}\n", q::to_string(report.tier),
                                      report.run_id, report.candidate_bundle_id.substr(0, 12), why);
    document["reason"] = why;
    document["could_not_run"] = false;
    return record(client, request_.run_id, document);
  }

  const QualifierConfig& config_;
  const q::ModelSet& set_;
  const q::RiskRegister& risks_;
  WaivedRuns& waived_;
  RecentRuns& recent_;
  qs::ChangeHistory& changes_;
  const RunCancels& cancels_;
  q::RunRequest request_;
  std::string owner_;
  const std::atomic<bool>& stop_;
  RunLines lines_;
  std::ostream out_;
  RunPages pages_;
  qs::RunRecorder recorder_;
};

}  // namespace

Status drive_requested_run(const QualifierConfig& config, const Setup& setup, SharedRecords& shared,
                           const q::RunRequest& request, const std::string& owner, const std::atomic<bool>& stop) {
  RequestedRun run(config, setup, shared, request, owner, stop);
  return run.drive();
}

}  // namespace kiln::qualifier
