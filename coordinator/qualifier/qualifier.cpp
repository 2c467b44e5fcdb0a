#include "coordinator/qualifier/qualifier.h"

#include <iterator>
#include <fstream>
#include <cctype>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <streambuf>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "common/metrics/exposition.h"
#include "common/metrics/process_metrics.h"
#include "common/protocol/roles.h"
#include "coordinator/qualification/ci_metrics.h"
#include "coordinator/qualification/flake_budget.h"
#include "coordinator/qualification/noise_history.h"
#include "coordinator/qualification/risk_status.h"
#include "coordinator/qualification/run.h"
#include "coordinator/qualification/run_service.h"
#include "coordinator/qualification/run_verdict.h"
#include "coordinator/qualification/schedule.h"
#include "coordinator/qualification/shell/bundle_builder.h"
#include "coordinator/qualification/shell/fleet_check.h"
#include "coordinator/qualification/shell/records_client.h"
#include "coordinator/qualification/shell/reproduction.h"
#include "coordinator/qualification/shell/run_driver.h"
#include "coordinator/qualification/shell/unit_runner.h"
#include "coordinator/qualification/unit_tier.h"
#include "coordinator/qualification/waiver.h"
#include "coordinator/qualification/workload_catalog.h"
#include "coordinator/qualifier/recent_runs.h"
#include "coordinator/qualifier/run_errors.h"
#include "coordinator/qualifier/ticket_sinks.h"
#include "coordinator/report/report_files.h"
#include "sim/workloads/catalog.h"

namespace kiln::qualifier {
namespace {

namespace fs = std::filesystem;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
using Clock = std::chrono::steady_clock;

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every line of every run goes to stderr whole, so the runs driven at once do not mix their lines.
std::mutex g_output;

void say(const std::string& line) {
  std::lock_guard lock(g_output);
  std::cerr << "kiln-qualifier: " << line << "\n" << std::flush;
}

// A run's progress lines, each prefixed with its run id.
class RunLines final : public std::streambuf {
 public:
  explicit RunLines(const std::string& run_id) : prefix_("kiln-qualifier: run " + run_id + ": ") {}

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return c;
    if (c != '\n') {
      line_ += static_cast<char>(c);
      return c;
    }
    std::lock_guard lock(g_output);
    std::cerr << prefix_ << line_ << "\n" << std::flush;
    line_.clear();
    return c;
  }

 private:
  std::string prefix_;
  std::string line_;
};

Status check_golden_dir(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return fail(Errc::config, fmt::format("golden_dir {} is not a directory; give the directory of the models' golden "
                                          "references (shared with the agents)",
                                          dir));
  }
  if (fs::directory_iterator(dir, error) == fs::directory_iterator()) {
    return fail(Errc::config, fmt::format("golden_dir {} is empty{}; it must hold the models' golden references", dir,
                                          error ? " or unreadable" : ""));
  }
  return {};
}

Result<std::unique_ptr<cli::Client>> connect(const QualifierConfig& config) {
  cli::Reconnect reconnect;
  reconnect.enabled = true;
  reconnect.notice = [](const std::string& text) { say(text); };
  return cli::Client::connect(config.client, std::move(reconnect));
}

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

// The run's pages in the [reports] directory, written each time its report is recorded. The
// other runs (the history and the index) are brought up to date from the coordinator when the run
// starts and again before its last record, not on every record of its progress.
class RunPages {
 public:
  RunPages(const std::string& directory, RecentRuns& recent, std::ostream& out)
      : directory_(directory), recent_(recent), out_(out) {}

  void read_other_runs(cli::Client& client) {
    if (directory_.empty()) return;
    if (auto ok = recent_.refresh(client); !ok) {
      out_ << "could not read the runs for the report pages' history; the pages show what was read before: "
           << ok.error().message << "\n";
    }
    others_ = recent_.digests();
  }

  void write(const nlohmann::json& document) {
    if (directory_.empty()) return;
    if (auto ok = report::write_run_files(directory_, document, others_); !ok) {
      out_ << "could not write the run's report pages: " << ok.error().message << "\n";
    }
  }

 private:
  const std::string& directory_;
  RecentRuns& recent_;
  std::ostream& out_;
  std::vector<report::RunDigest> others_;
};

// The claim on one run while it is driven: renewed every third of its length; lost when another
// qualifier holds it, or when it could not be renewed for as long as it lasts.
class Claim {
 public:
  Claim(cli::Client& client, const QualifierConfig& config, std::string run_id, std::string owner)
      : client_(client), claim_{std::move(run_id), std::move(owner), config.claim_ms, 0},
        renewed_(Clock::now()), tried_(renewed_) {}

  Status keep() {
    const auto now = Clock::now();
    if (now - tried_ < std::chrono::milliseconds(claim_.lease_ms / 3)) return {};
    tried_ = now;
    auto ok = qs::claim_run(client_, claim_);
    if (ok) {
      renewed_ = now;
      return {};
    }
    if (ok.error().code == Errc::conflict) return fail(Errc::conflict, "its claim was lost: " + ok.error().message);
    if (now - renewed_ >= std::chrono::milliseconds(claim_.lease_ms)) {
      return fail(Errc::unavailable, fmt::format("its claim could not be renewed for {} ms ({}); another qualifier may "
                                                 "take it up",
                                                 claim_.lease_ms, ok.error().message));
    }
    return {};
  }

 private:
  cli::Client& client_;
  q::RunClaim claim_;
  Clock::time_point renewed_;
  Clock::time_point tried_;
};

// The newest recorded jobs per (model, revision) the sequential gate estimates noise from: about
// 10 to 20 repeats each, so a few hundred samples, enough for a standard error near 5%.
constexpr std::size_t kNoiseRecordJobs = 20;
// How far back the noise records and the nightly's reproducibility sample are looked for: the
// stack changes daily, and a reader of the latest runs must stop somewhere however long the
// history.
constexpr DurationMs kLookbackMs = 30 * 24 * kHourMs;

// The sequential gate's noise records: the latest reports, read back until each model of the set
// has kNoiseRecordJobs batches on each of `revisions`, or for kLookbackMs.
Result<q::BaselineHistory> latest_baseline_history(cli::Client& client, const q::ModelSet& set,
                                                   const std::vector<std::string>& revisions) {
  const TimeMs since_ms = wall_now_ms() - kLookbackMs;
  std::map<std::pair<std::string, std::string>, std::size_t> batches;
  const auto enough = [&](const nlohmann::json& report) {
    if (report.value("started_at_ms", TimeMs{0}) < since_ms) return true;
    bool all = true;
    for (const auto& model : set.models) {
      for (const auto& revision : revisions) all = all && batches[{model.name, revision}] >= kNoiseRecordJobs;
    }
    if (all) return true;
    for (const auto& [pair, more] : q::baseline_history({report}, kNoiseRecordJobs)) batches[pair] += more.size();
    return false;
  };
  auto runs = qs::list_latest_runs(client, enough);
  if (!runs) return tl::unexpected(runs.error());
  return q::baseline_history(*runs, kNoiseRecordJobs);
}

// What the coordinator holds that the run's input is made of.
Result<q::RunFacts> gather_facts(cli::Client& client, const q::RunRequest& request, const q::ModelSet& set,
                                 qs::ChangeHistory& changes) {
  q::RunFacts facts;
  facts.set = set;
  auto candidate = qs::get_bundle(client, request.bundle_id);
  if (!candidate) {
    if (candidate.error().code == Errc::not_found) {
      return fail(Errc::not_found, fmt::format("bundle {} is not recorded", request.bundle_id));
    }
    return tl::unexpected(candidate.error());
  }
  facts.candidate = *candidate;
  facts.bundles[candidate->id] = std::move(*candidate);
  auto history = changes.read(client);
  if (!history) return tl::unexpected(history.error());
  facts.history = std::move(*history);
  auto baselines = qs::list_baselines(client);
  if (!baselines) return tl::unexpected(baselines.error());
  for (const auto& [revision, baseline] : *baselines) facts.accepted_ids[revision] = baseline.bundle_id;
  auto nodes = cli::expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  std::set<std::string> revisions;
  for (const auto& node : nodes->nodes) revisions.insert(node.hardware_revision);
  facts.fleet_revisions.assign(revisions.begin(), revisions.end());
  if (q::perf_rule_for(request) == stats::GateRule::sequential) {
    auto history = latest_baseline_history(client, set, facts.fleet_revisions);
    if (!history) return tl::unexpected(history.error());
    facts.baseline_history = std::move(*history);
  }
  if (auto earlier = qs::get_run(client, request.run_id); earlier && earlier->contains("baseline_bundle_ids")) {
    facts.recorded_baseline_ids = earlier->at("baseline_bundle_ids").get<std::map<std::string, std::string>>();
  }
  // The baselines' bundles, each read by its id (one not recorded is run_input_for's to refuse).
  for (const auto* ids : {&facts.accepted_ids, &facts.recorded_baseline_ids}) {
    for (const auto& [revision, id] : *ids) {
      if (facts.bundles.contains(id)) continue;
      auto bundle = qs::get_bundle(client, id);
      if (bundle) {
        facts.bundles.emplace(id, std::move(*bundle));
      } else if (bundle.error().code != Errc::not_found) {
        return tl::unexpected(bundle.error());
      }
    }
  }
  return facts;
}

// The runs whose recorded verdict relies on waivers, each with the waivers it relies on: once one
// of those is no longer in force (expired, withdrawn, replaced), the run is judged again by the
// waivers in force (waiver.h revoke_lapsed_waivers). Shared by the threads that drive runs and the
// main loop.
class WaivedRuns {
 public:
  // A run is a qualification run's report or a stability run's (kiln stability).
  using RunKey = std::pair<protocol::RecordKind, std::string>;

  // Keeps the run when its report relies on waivers, forgets it otherwise.
  void note(const nlohmann::json& report) {
    const RunKey key{kind_of(report), report.value("run_id", "")};
    std::lock_guard lock(mutex_);
    auto waivers = report.find("waivers");
    if (waivers != report.end() && waivers->is_array() && !waivers->empty()) {
      relied_[key] = *waivers;
    } else {
      relied_.erase(key);
    }
  }
  // The runs relying on a waiver not in force at `now` among those the coordinator holds.
  std::vector<RunKey> due(const std::vector<q::Waiver>& recorded, TimeMs now) const {
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

  static protocol::RecordKind kind_of(const nlohmann::json& report) {
    return report.value("schema", "") == "kiln.stability-run/1" ? protocol::RecordKind::stability_run
                                                                : protocol::RecordKind::qualification_run;
  }

 private:
  mutable std::mutex mutex_;
  std::map<RunKey, nlohmann::json> relied_;
};

// One requested run from its request to its finished report. Returns early (the run stays
// unfinished, for this or another qualifier to take up) when stopped, when the claim is lost or
// when the coordinator stops answering (run_errors.h); a run that cannot be carried out, or was
// cancelled, ends with the error verdict.
class RequestedRun {
 public:
  RequestedRun(const QualifierConfig& config, const Setup& setup, WaivedRuns& waived, RecentRuns& recent,
               qs::ChangeHistory& changes, const RunCancels& cancels, q::RunRequest request, std::string owner,
               const std::atomic<bool>& stop)
      : config_(config), set_(setup.set), risks_(setup.risks), waived_(waived), recent_(recent), changes_(changes),
        cancels_(cancels), request_(std::move(request)), owner_(std::move(owner)), stop_(stop),
        lines_(request_.run_id), out_(&lines_), pages_(config_.reports_dir, recent_, out_) {}

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
    judge_risks(c, document, sink);
    if (auto ok = record(c, request_.run_id, document); !ok) return ok;
    waived_.note(document);
    out_ << (whole->passed ? "passed\n" : document.value("passed", false) ? "passed with waivers\n" : "FAILED\n");
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
  // never assumed.
  void judge_risks(cli::Client& client, nlohmann::json& document, q::TicketSink& sink) {
    if (auto waivers = qs::list_waivers(client); !waivers) {
      out_ << "could not list the waivers; none is applied: " << waivers.error().message << "\n";
    } else {
      for (const auto& text : q::apply_waivers(document, *waivers, risks_, wall_now_ms())) out_ << text << "\n";
    }
    for (const auto& page : q::risk_gate_pages(risks_, document, wall_now_ms())) {
      if (!page.ticket) {
        out_ << q::page_text(page) << "\n";
      } else if (auto filed = sink.file(*page.ticket); !filed) {
        out_ << fmt::format("could not page {} for {}: {}\n", page.ticket->team, page.ticket->title,
                            filed.error().message);
      } else if (*filed == q::FileResult::filed) {
        out_ << q::page_text(page) << "\n";
      }
    }
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
  Status record(cli::Client& client, const std::string& run_id, const nlohmann::json& document) {
    if (auto ok = qs::record_run(client, run_id, document); !ok) return ok;
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
};

// A waiver no longer in force (expired, withdrawn, replaced) that a run relied on: the run is
// judged again by the waivers in force, failing unless another lets it through. A waiver written
// after the run it names had finished and failed: that run is judged again with the waivers in
// force. Either way its report (and pages) are recorded again when the verdict changed, so
// whoever reads the run (`kiln run`, a promotion) sees it. `seen`: the waivers already looked at
// (key and time written).
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

// Gates fire on their own for stability runs too (kiln stability records them): each one recorded
// since the last look (`after_seq`) and not judged yet gets the waivers in force, then every risk
// gate it still fails pages its team, as a qualification run's do (RequestedRun::judge_risks). It
// is recorded again marked judged, so that a qualifier started later pages none of it twice.
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

// A run being driven on its own thread.
struct Driving {
  std::string run_id;
  std::atomic<bool> failed{false};  // its driving stopped on an error: taken up again after a wait
  std::atomic<bool> done{false};
  std::thread thread;
};

// Asks for tonight's nightly when the calendar says it is due (schedule.h): the bundle at the
// latest recorded change, built as `kiln bundle build` builds it, under the night's run id. A
// second qualifier asking at the same moment writes the same request, which the coordinator
// keeps once. `problem` holds the last problem said, so a failing build is said once a night.
void ask_for_scheduled_nightly(cli::Client& client, const QualifierConfig& config,
                               const std::vector<q::RunRequest>& requests, qs::ChangeHistory& changes,
                               std::string& problem) {
  std::set<std::string> requested;
  for (const auto& request : requests) requested.insert(request.run_id);
  const auto night = q::nightly_due(config.schedule, wall_now_ms() + config.clock_offset_ms, requested);
  if (!night) return;
  const auto say_once = [&problem](const std::string& line) {
    if (line != problem) say(line);
    problem = line;
  };
  auto builder = qs::make_configured_builder(config.builder, config.builder_args, config.bundle_dir,
                                             config.schedule_revisions);
  auto history = changes.read(client);
  if (!history) {
    return say_once(fmt::format("tonight's nightly {} is due but the change history could not be read: {}; trying "
                                "again on the next poll",
                                night->run_id, history.error().message));
  }
  auto built = qs::build_recorded_bundle(client, *builder, "", *history);
  if (!built) {
    return say_once(fmt::format("tonight's nightly {} is due but its bundle could not be built: {}; trying again on the "
                                "next poll",
                                night->run_id, built.error().message));
  }
  q::RunRequest request;
  request.run_id = night->run_id;
  request.tier = q::Tier::nightly;
  request.bundle_id = built->bundle.id;
  request.max_models = config.schedule_max_models;
  request.deadline_ms = night->deadline_ms - config.clock_offset_ms;
  if (auto ok = qs::request_run(client, request); !ok) {
    return say_once(fmt::format("could not ask for tonight's nightly {}: {}", night->run_id, ok.error().message));
  }
  say(fmt::format("asked for tonight's nightly {}: bundle {} at change {}, due by {} UTC", night->run_id,
                  built->bundle.id.substr(0, 12), built->at_change, q::utc_time_of_day(request.deadline_ms)));
}

// The qualifier's /metrics: CI's health from the coordinator's records, read on the HTTP server's
// thread over a connection of its own (each run's connection is its thread's), and on each scrape
// only what may have changed since the last: new requests and reports, the reports of runs not
// finished, the tickets.
class CiMetricsPage {
 public:
  explicit CiMetricsPage(const QualifierConfig& config) : config_(config) {}

  http::Response answer() {
    if (auto ok = refresh(); !ok) {
      client_.reset();  // connect afresh on the next scrape
      if (!read_once_) {
        return http::text_response(503, "cannot read the coordinator's records yet: " + ok.error().message);
      }
      if (ok.error().message != problem_) say("/metrics shows what was read before: " + ok.error().message);
      problem_ = ok.error().message;
    } else {
      read_once_ = true;
      problem_.clear();
    }
    http::Response response;
    response.content_type = std::string(metrics::kContentType);
    response.body = metrics_.render(wall_now_ms()) + metrics::process_metrics_text();
    return response;
  }

 private:
  Status refresh() {
    if (!client_) {
      auto client = cli::Client::connect(config_.client);
      if (!client) return tl::unexpected(client.error());
      client_ = std::move(*client);
    }
    auto requests = qs::list_run_requests(*client_, requests_seq_);
    if (!requests) return tl::unexpected(requests.error());
    for (const auto& recorded : *requests) {
      requests_seq_ = std::max(requests_seq_, recorded.seq);
      metrics_.add_request(recorded.request, recorded.requested_at_ms);
    }
    auto reports = qs::list_runs_after(*client_, reports_seq_);
    if (!reports) return tl::unexpected(reports.error());
    for (const auto& report : *reports) metrics_.add_report(report);
    for (const std::string& run_id : metrics_.unfinished_runs()) {
      auto report = qs::get_run(*client_, run_id);
      if (report) {
        metrics_.add_report(*report);
      } else if (report.error().code != Errc::not_found) {  // not_found: not started yet
        return tl::unexpected(report.error());
      }
    }
    auto tickets = qs::list_tickets(*client_);
    if (!tickets) return tl::unexpected(tickets.error());
    metrics_.set_tickets(*tickets);
    return {};
  }

  const QualifierConfig& config_;
  std::unique_ptr<cli::Client> client_;
  std::uint64_t requests_seq_ = 0;
  std::uint64_t reports_seq_ = 0;
  q::CiMetrics metrics_;
  bool read_once_ = false;
  std::string problem_;  // the last one said
};

Status check_role(cli::Client& client) {
  auto me = cli::expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
  if (!me) return tl::unexpected(me.error());
  for (const auto cls : {protocol::PriorityClass::presubmit, protocol::PriorityClass::nightly,
                         protocol::PriorityClass::release, protocol::PriorityClass::bisect}) {
    if (protocol::role_may_submit(me->role, cls)) continue;
    return fail(Errc::unauthorized,
                fmt::format("the qualifier's key {} has role {}, which may not submit {} jobs; give it a key of role "
                            "ci (kiln keygen, then a [[keys]] entry in coordinator.toml)",
                            me->key_name, protocol::enum_name(me->role), protocol::enum_name(cls)));
  }
  return {};
}

}  // namespace

Result<Setup> check_setup(const QualifierConfig& config) {
  auto set = q::load_model_set_file(config.model_set);
  if (!set) return fail(Errc::config, fmt::format("model_set: {}", set.error().message));
  q::RiskRegister risks;
  if (!config.risk_register.empty()) {
    auto loaded = q::load_risk_register_file(config.risk_register);
    if (!loaded) return fail(Errc::config, fmt::format("risk_register: {}", loaded.error().message));
    risks = std::move(*loaded);
  }
  Result<q::WorkloadCatalog> catalog = kiln::sim::workloads::sim_workload_catalog();
  if (!config.workload_catalog.empty()) catalog = q::load_workload_catalog_file(config.workload_catalog);
  if (!catalog) return fail(Errc::config, fmt::format("workload_catalog: {}", catalog.error().message));
  if (auto ok = q::check_workloads(*set, *catalog); !ok) {
    return fail(Errc::config, fmt::format("{}: {}", config.model_set, ok.error().message));
  }
  if (auto ok = check_golden_dir(config.golden_dir); !ok) return tl::unexpected(ok.error());
  if (auto sink = open_ticket_sink(config.tickets_dir, config.webhook_config); !sink) {
    return tl::unexpected(sink.error());
  }
  if (!config.reports_dir.empty()) {
    if (auto ok = report::prepare_report_directory(config.reports_dir); !ok) return tl::unexpected(ok.error());
  }
  if (auto client = cli::Client::connect(config.client); !client) return tl::unexpected(client.error());
  return Setup{std::move(*set), std::move(risks)};
}

// The report pages of [reports] directory, as they are written there: `/` is the index, `/NAME`
// a run's page or JSON. Only plain file names of that directory are served (no path can leave it).
http::Response report_file(const std::string& directory, const http::Request& request) {
  const std::string name = request.path == "/" ? "index.html" : request.path.substr(1);
  const bool plain = !name.empty() && name.front() != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
                     });
  const std::filesystem::path file = std::filesystem::path(directory) / name;
  const bool html = name.ends_with(".html");
  if (!plain || !(html || name.ends_with(".json"))) {
    return http::text_response(404, "no such page: the run pages are /, /RUN.html and /RUN.json");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return http::text_response(404, name == "index.html" ? "no run has been recorded yet: the index comes with the first"
                                                         : "no such run page: " + name + "; the index at / lists them");
  }
  http::Response response;
  response.content_type = html ? "text/html; charset=utf-8" : "application/json";
  response.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return response;
}

Status run_qualifier(const QualifierConfig& config, const Setup& setup, const std::atomic<bool>& stop) {
  auto client = connect(config);
  if (!client) return tl::unexpected(client.error());
  if (auto ok = check_role(**client); !ok) return ok;
  const std::string owner = fmt::format("{}/{}", config.name, ::getpid());
  auto sink = open_ticket_sink(config.tickets_dir, config.webhook_config);
  if (!sink) return tl::unexpected(sink.error());
  const std::string sink_name = ticket_sink_name(config.webhook_config);
  CiMetricsPage metrics_page(config);
  std::unique_ptr<http::Server> metrics_server;  // after the page: stopped before it goes
  if (!config.http_listen.empty()) {
    http::Router router;
    router.exact("/metrics", [&metrics_page](const http::Request&) { return metrics_page.answer(); });
    if (!config.reports_dir.empty()) {
      router.prefix("/", [directory = config.reports_dir](const http::Request& request) {
        return report_file(directory, request);
      });
    }
    auto server = http::Server::start(config.http_listen, std::move(router), {},
                                      "change [http] listen in qualifier.toml, or stop what listens there");
    if (!server) return tl::unexpected(server.error());
    metrics_server = std::move(*server);
    say(fmt::format("serves /metrics on http://{}/metrics{}", metrics_server->address(),
                    config.reports_dir.empty() ? ""
                                               : fmt::format(" and the report pages on http://{}/",
                                                             metrics_server->address())));
  }
  say(fmt::format("{} drives the runs requested on {} (claims of {} ms) and delivers tickets to the {} sink", owner,
                  config.client.coordinator_endpoint, config.claim_ms, sink_name));
  if (config.schedule.enabled) {
    say(fmt::format("starts a nightly every night at {} UTC, due by {} UTC{}",
                    q::time_of_day_text(config.schedule.start_minute),
                    q::time_of_day_text(config.schedule.deadline_minute),
                    config.clock_offset_ms == 0 ? "" : fmt::format(" (its clock {} ms off the wall clock)",
                                                                   config.clock_offset_ms)));
  }
  std::vector<q::RunRequest> requests;
  std::uint64_t last_seq = 0;
  std::set<std::string> finished;
  std::list<Driving> driving;
  std::string schedule_problem;
  std::set<std::string> waivers_seen;
  std::uint64_t stability_seq = 0;
  // The runs recorded before it started that rely on waivers, so that their expiry is seen too.
  WaivedRuns waived;
  // The other runs' digests and flakes, read once and then only what changed, for all its runs.
  // Their first read, of every report, is the one that finds the runs relying on waivers too, and
  // the runs already finished (so that none of those is read again to learn it).
  RecentRuns recent;
  // The change history, read once and then only the changes recorded since, for all its runs.
  qs::ChangeHistory changes;
  RunCancels cancels;
  std::uint64_t cancels_seq = 0;
  std::string cancels_problem;  // the last one said
  RetryBackoff retries(config.poll_interval_ms);
  const auto note = [&waived, &finished](const nlohmann::json& report) {
    waived.note(report);
    if (report.value("finished", false)) finished.insert(report.value("run_id", ""));
  };
  if (auto ok = recent.refresh(**client, note); !ok) {
    say("could not read the run reports at start (" + ok.error().message +
        "): the runs recorded before relying on waivers are not judged again when those expire; restart the "
        "qualifier once the coordinator answers");
  }
  if (auto runs = qs::list_runs(**client, protocol::RecordKind::stability_run); runs) {
    for (const auto& report : *runs) waived.note(report);
  }
  while (!stop.load()) {
    driving.remove_if([&retries](Driving& d) {
      if (!d.done.load()) return false;
      d.thread.join();
      if (d.failed.load()) retries.failed(d.run_id, Clock::now());
      else retries.forget(d.run_id);
      return true;
    });
    if (auto more = qs::list_run_cancels(**client, cancels_seq); more) {
      for (const auto& cancel : *more) cancels.add(cancel.run_id, cancel.cancelled_by);
      cancels_problem.clear();
    } else if (more.error().message != cancels_problem) {
      cancels_problem = more.error().message;
      say("could not list the cancelled runs (said once until it changes): " + cancels_problem);
    }
    if (auto more = qs::list_run_requests(**client, last_seq); more) {
      for (auto& recorded_request : *more) {
        last_seq = std::max(last_seq, recorded_request.seq);
        requests.push_back(std::move(recorded_request.request));
      }
    } else {
      say("could not list the run requests: " + more.error().message);
    }
    if (config.schedule.enabled) ask_for_scheduled_nightly(**client, config, requests, changes, schedule_problem);
    deliver_due_tickets(**client, **sink, sink_name, config.delivery, wall_now_ms(), say);
    judge_waived_runs(**client, config, setup.risks, waivers_seen, waived, recent);
    judge_stability_runs(**client, config, setup.risks, stability_seq, waived);
    std::set<std::string> busy;
    for (const auto& d : driving) busy.insert(d.run_id);
    for (const auto& run_id : q::runs_to_take_up(requests, finished, busy)) {
      if (driving.size() >= config.max_runs) break;
      if (!retries.may_try(run_id, Clock::now())) continue;
      if (auto report = qs::get_run(**client, run_id); report && report->value("finished", false)) {
        finished.insert(run_id);
        continue;
      }
      if (auto claimed = qs::claim_run(**client, {run_id, owner, config.claim_ms, 0}); !claimed) {
        if (claimed.error().code != Errc::conflict) say("could not claim run " + run_id + ": " + claimed.error().message);
        continue;
      }
      const auto request = std::find_if(requests.begin(), requests.end(), [&](const auto& r) { return r.run_id == run_id; });
      say("drives run " + run_id);
      Driving& d = driving.emplace_back();
      d.run_id = run_id;
      d.thread = std::thread([&config, &setup, &waived, &recent, &changes, &cancels, &stop, &d, owner,
                              request = *request] {
        RequestedRun run(config, setup, waived, recent, changes, cancels, request, owner, stop);
        if (auto ok = run.drive(); !ok) {
          say(fmt::format("run {}: {}", request.run_id, ok.error().message));
          d.failed.store(true);
        }
        d.done.store(true);
      });
    }
    for (auto waited = Clock::now(); !stop.load() && Clock::now() - waited < std::chrono::milliseconds(config.poll_interval_ms);) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  for (auto& d : driving) d.thread.join();
  say("stopped; the runs it drove go on when a qualifier takes them up");
  return {};
}

}  // namespace kiln::qualifier
