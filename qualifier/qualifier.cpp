#include "qualifier/qualifier.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <list>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/http/server.h"
#include "common/protocol/roles.h"
#include "qualification/run_service.h"
#include "qualification/run_verdict.h"
#include "qualification/schedule.h"
#include "client/records_client.h"
#include "qualification/workload_catalog.h"
#include "common/process/installed_file.h"
#include "qualifier/qualifier_log.h"
#include "qualifier/qualifier_metrics.h"
#include "qualifier/requested_run.h"
#include "qualifier/run_pages.h"
#include "qualifier/scheduled_nightly.h"
#include "qualifier/ticket_sinks.h"
#include "report/report_files.h"

namespace kiln::qualifier {
namespace {

namespace fs = std::filesystem;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;
using Clock = std::chrono::steady_clock;

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

// A run being driven on its own thread.
struct Driving {
  std::string run_id;
  std::atomic<bool> failed{false};  // its driving stopped on an error: taken up again after a wait
  std::atomic<bool> done{false};
  std::thread thread;
};

// /metrics and, with a [reports] directory, the report pages; none without [http] listen.
Result<std::unique_ptr<http::Server>> serve_http(const QualifierConfig& config, CiMetricsPage& metrics_page) {
  if (config.http_listen.empty()) return std::unique_ptr<http::Server>();
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
  say(fmt::format("serves /metrics on http://{}/metrics{}", (*server)->address(),
                  config.reports_dir.empty() ? ""
                                             : fmt::format(" and the report pages on http://{}/", (*server)->address())));
  return std::move(*server);
}

// The main loop: on every poll, what the coordinator recorded since the last (cancels, requests,
// waivers, stability runs), the nightly when due, the tickets to deliver, and the runs to take up,
// each driven on its own thread.
class Qualifier {
 public:
  Qualifier(const QualifierConfig& config, const Setup& setup, cli::Client& client, qualification::TicketSink& sink,
            const std::atomic<bool>& stop)
      : config_(config), setup_(setup), client_(client), sink_(sink), stop_(stop),
        owner_(fmt::format("{}/{}", config.name, ::getpid())), sink_name_(ticket_sink_name(config.webhook_config)),
        retries_(config.poll_interval_ms) {}

  void run() {
    say(fmt::format("{} drives the runs requested on {} (claims of {} ms) and delivers tickets to the {} sink", owner_,
                    config_.client.coordinator_endpoint, config_.claim_ms, sink_name_));
    if (config_.schedule.enabled) {
      say(fmt::format("starts a nightly every night at {} UTC, due by {} UTC{}",
                      q::time_of_day_text(config_.schedule.start_minute),
                      q::time_of_day_text(config_.schedule.deadline_minute),
                      config_.clock_offset_ms == 0 ? "" : fmt::format(" (its clock {} ms off the wall clock)",
                                                                      config_.clock_offset_ms)));
    }
    read_recorded_runs();
    while (!stop_.load()) {
      poll();
      for (auto waited = Clock::now();
           !stop_.load() && Clock::now() - waited < std::chrono::milliseconds(config_.poll_interval_ms);) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    for (auto& d : driving_) d.thread.join();
    say("stopped; the runs it drove go on when a qualifier takes them up");
  }

 private:
  // The runs recorded before it started that rely on waivers, so that their expiry is seen too.
  // The first read of the other runs, of every report, is the one that finds them, and the runs
  // already finished (so that none of those is read again to learn it).
  void read_recorded_runs() {
    const auto note = [this](const nlohmann::json& report) {
      const q::GateRun run = q::gate_run_from_report(report);
      shared_.waived.note(run);
      if (run.finished) finished_.insert(run.run_id);
    };
    if (auto ok = shared_.recent.refresh(client_, note); !ok) {
      say("could not read the run reports at start (" + ok.error().message +
          "): the runs recorded before relying on waivers are not judged again when those expire; restart the "
          "qualifier once the coordinator answers");
    }
    if (auto runs = qs::list_runs(client_, protocol::RecordKind::stability_run); runs) {
      for (const auto& report : *runs) shared_.waived.note(report);
    }
  }

  void poll() {
    driving_.remove_if([this](Driving& d) {
      if (!d.done.load()) return false;
      d.thread.join();
      if (d.failed.load()) retries_.failed(d.run_id, Clock::now());
      else retries_.forget(d.run_id);
      return true;
    });
    read_cancels();
    if (auto more = qs::list_run_requests(client_, requests_seq_); more) {
      for (auto& recorded_request : *more) {
        requests_seq_ = std::max(requests_seq_, recorded_request.seq);
        requests_.push_back(std::move(recorded_request.request));
      }
    } else {
      say("could not list the run requests: " + more.error().message);
    }
    if (config_.schedule.enabled) {
      ask_for_scheduled_nightly(client_, config_, requests_, shared_.changes, schedule_problem_);
    }
    deliver_due_tickets(client_, sink_, sink_name_, config_.delivery, wall_now_ms(), say);
    judge_waived_runs(client_, config_, setup_.risks, waivers_seen_, shared_.waived, shared_.recent);
    judge_stability_runs(client_, config_, setup_.risks, stability_seq_, shared_.waived);
    take_up_runs();
  }

  void read_cancels() {
    if (auto more = qs::list_run_cancels(client_, cancels_seq_); more) {
      for (const auto& cancel : *more) shared_.cancels.add(cancel.run_id, cancel.cancelled_by);
      cancels_problem_.clear();
    } else if (more.error().message != cancels_problem_) {
      cancels_problem_ = more.error().message;
      say("could not list the cancelled runs (said once until it changes): " + cancels_problem_);
    }
  }

  // Claims each requested run not finished nor driven, up to max_runs at once, and drives it.
  void take_up_runs() {
    std::set<std::string> busy;
    for (const auto& d : driving_) busy.insert(d.run_id);
    for (const auto& run_id : q::runs_to_take_up(requests_, finished_, busy)) {
      if (driving_.size() >= config_.max_runs) break;
      if (!retries_.may_try(run_id, Clock::now())) continue;
      if (auto report = qs::get_run(client_, run_id); report && q::gate_run_from_report(*report).finished) {
        finished_.insert(run_id);
        continue;
      }
      if (auto claimed = qs::claim_run(client_, {run_id, owner_, config_.claim_ms, 0}); !claimed) {
        if (claimed.error().code != Errc::conflict) say("could not claim run " + run_id + ": " + claimed.error().message);
        continue;
      }
      const auto request =
          std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.run_id == run_id; });
      say("drives run " + run_id);
      Driving& d = driving_.emplace_back();
      d.run_id = run_id;
      d.thread = std::thread([this, &d, request = *request] {
        if (auto ok = drive_requested_run(config_, setup_, shared_, request, owner_, stop_); !ok) {
          say(fmt::format("run {}: {}", request.run_id, ok.error().message));
          d.failed.store(true);
        }
        d.done.store(true);
      });
    }
  }

  const QualifierConfig& config_;
  const Setup& setup_;
  cli::Client& client_;
  qualification::TicketSink& sink_;
  const std::atomic<bool>& stop_;
  const std::string owner_;
  const std::string sink_name_;
  SharedRecords shared_;
  std::vector<q::RunRequest> requests_;
  std::uint64_t requests_seq_ = 0;
  std::set<std::string> finished_;
  std::list<Driving> driving_;
  RetryBackoff retries_;
  std::string schedule_problem_;
  std::set<std::string> waivers_seen_;
  std::uint64_t stability_seq_ = 0;
  std::uint64_t cancels_seq_ = 0;
  std::string cancels_problem_;  // the last one said
};

}  // namespace

namespace {

// Without workload_catalog, the sim package's catalog (`kiln-workload-model --list --json`, built
// into the build tree and installed beside the sim's set), so that a fleet of simulated chips needs
// no setting while the qualifier links no simulator code.
Result<q::WorkloadCatalog> load_workload_catalog(const QualifierConfig& config) {
  if (!config.workload_catalog.empty()) {
    auto catalog = q::load_workload_catalog_file(config.workload_catalog);
    if (!catalog) return fail(Errc::config, fmt::format("workload_catalog: {}", catalog.error().message));
    return catalog;
  }
  const std::string sim_catalog = process::installed_file(
      "share/kiln/sim/workloads.json", std::string(KILN_DATA_DIR_FROM_BIN) + "/sim/workloads.json");
  std::error_code ec;
  if (!std::filesystem::exists(sim_catalog, ec)) {
    return fail(Errc::config, fmt::format("qualifier.toml names no workload_catalog and the sim's ({}) is not installed: "
                                          "set workload_catalog to the JSON file of the workloads your fleet runs "
                                          "(docs/qualification.md, \"The workload catalog\")",
                                          sim_catalog));
  }
  auto catalog = q::load_workload_catalog_file(sim_catalog);
  if (!catalog) return fail(Errc::config, fmt::format("the sim's workload catalog: {}", catalog.error().message));
  return catalog;
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
  auto catalog = load_workload_catalog(config);
  if (!catalog) return tl::unexpected(catalog.error());
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

Status run_qualifier(const QualifierConfig& config, const Setup& setup, const std::atomic<bool>& stop) {
  auto client = connect(config);
  if (!client) return tl::unexpected(client.error());
  if (auto ok = check_role(**client); !ok) return ok;
  auto sink = open_ticket_sink(config.tickets_dir, config.webhook_config);
  if (!sink) return tl::unexpected(sink.error());
  CiMetricsPage metrics_page(config);
  auto metrics_server = serve_http(config, metrics_page);  // after the page: stopped before it goes
  if (!metrics_server) return tl::unexpected(metrics_server.error());
  Qualifier(config, setup, **client, **sink, stop).run();
  return {};
}

}  // namespace kiln::qualifier
