// kiln-bench-history: what a coordinator's start-up and memory cost as its store's history grows.
// For each history size it fills a SQLite store with that many ended jobs of the size of the demo's
// (their output and result), a rollout install per node now and then, and a few queued jobs; then
// starts the real kiln-coordinator on it twice, holding the default number of ended jobs and
// holding every job, and times each start until /metrics answers, reads its resident memory, and
// times `get_job` of a job it holds and of the oldest (read back from the store). Medians of the
// repeats, all in the same run. With --run-reports it stores that many qualification run reports
// too (with each run's change, request and claim), and times `get_record` of the oldest and the
// newest report (both read from the store, which holds them: record_book.h). See docs/performance.md, "History".
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/http/client.h"
#include "common/keys.h"
#include "common/stats/shift.h"
#include "common/transport/loopback_ports.h"
#include "common/version.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/fake_fleet.h"
#include "coordinator/core/job_retention.h"
#include "coordinator/core/knobs.h"
#include "coordinator/store/store.h"

namespace fs = std::filesystem;
using kiln::TimeMs;
using namespace kiln::bench;

namespace {

struct Settings {
  std::vector<std::size_t> history = {10000, 100000};
  double doc_kb = 11;  // the demo's jobs: 11 KB a document on average
  std::size_t run_reports = 0;
  double report_kb = 28;  // the demo's presubmit runs: 28 KB a report
  std::size_t held = kiln::coordinator::CoordinatorKnobs{}.ended_jobs_in_memory;
  int repeats = 3;
  int gets = 200;
  std::string coordinator;
  bool json = false;
  bool keep = false;
};

constexpr std::size_t kEveryJob = 10'000'000;  // ended_jobs_in_memory's most: every job held
constexpr std::size_t kNodes = 100;
constexpr std::size_t kQueued = 10;

// An ended job the size of the demo's: what its workload printed and the figures it reported.
kiln::coordinator::JobRecord ended_job(std::uint64_t id, double doc_kb) {
  using kiln::coordinator::JobRecord;
  JobRecord job;
  job.summary.job_id = id;
  job.summary.state = id % 7 == 0 ? kiln::protocol::JobState::failed : kiln::protocol::JobState::succeeded;
  job.summary.workload = "smoke";
  job.summary.submitted_by = "bench-ci";
  job.summary.node_id = fmt::format("n{:03}", id % kNodes);
  job.summary.chips = 8;
  job.summary.attempt = 1;
  job.timeout_ms = 600000;
  job.summary.priority_class = kiln::protocol::PriorityClass::nightly;
  job.submitted_at_ms = 1'700'000'000'000 + static_cast<TimeMs>(id) * 1000;  // long ended
  job.started_at_ms = job.submitted_at_ms + 200;
  job.finished_at_ms = job.started_at_ms + 30000;
  const auto bytes = static_cast<std::size_t>(doc_kb * 1024);
  // Half of it output, within the 64 KB an output tail may hold; the rest the result.
  const std::size_t output_bytes = std::min<std::size_t>(bytes / 2, 60000);
  while (job.output_tail.size() < output_bytes) {
    job.output_tail += fmt::format("chip {} KCA-{:010X} fw 1.0.0: 41.{} C, link up, uncorrected ECC 0\n",
                                   job.output_tail.size() % 8, id * 2654435761u % 0xFFFFFFFFFF, id % 10);
  }
  nlohmann::json result = {{"passed", true}, {"steps", nlohmann::json::array()}};
  for (std::size_t step = 0, size = result.dump().size(); size < bytes - output_bytes; ++step) {
    nlohmann::json measured = {{"step", step},
                               {"tokens_per_s", 1000.0 + static_cast<double>((id + step) % 97)},
                               {"latency_ms", 12.5 + static_cast<double>(step % 13)}};
    size += measured.dump().size() + 1;
    result["steps"].push_back(std::move(measured));
  }
  job.result = result.dump();
  return job;
}

std::string report_key(std::size_t n) { return fmt::format("run-{:07}", n); }

// A finished qualification run's report of about `kb` KB: its verdicts per model and revision.
kiln::protocol::RecordEntry run_report(std::size_t n, double kb) {
  kiln::protocol::RecordEntry record;
  record.kind = kiln::protocol::RecordKind::qualification_run;
  record.key = report_key(n);
  record.seq = n;
  record.updated_at_ms = 1'700'000'000'000 + static_cast<TimeMs>(n) * 60000;
  record.written_by = "bench-ci";
  nlohmann::json report = {{"run_id", record.key}, {"tier", "presubmit"}, {"finished", true},
                           {"models", nlohmann::json::array()}};
  const auto bytes = static_cast<std::size_t>(kb * 1024);
  for (std::size_t i = 0, size = report.dump().size(); size < bytes; ++i) {
    nlohmann::json model = {{"model", fmt::format("model-{}", i % 40)}, {"revision", i % 2 ? "a" : "b"},
                            {"verdict", "pass"}, {"tokens_per_s", 1000.0 + static_cast<double>((n + i) % 97)},
                            {"detail", "within the baseline's noise (sequential test, 12 samples)"}};
    size += model.dump().size() + 1;
    report["models"].push_back(std::move(model));
  }
  record.document = report.dump();
  return record;
}

// What comes with each presubmit run besides its report, as the demo writes them: the change it
// qualifies, the run's request and the qualifier's claim on it (a few hundred bytes each).
std::vector<kiln::protocol::RecordEntry> run_records(std::size_t n) {
  using kiln::protocol::RecordKind;
  const std::string change_id = fmt::format("c{:07}", n);
  const TimeMs at = 1'700'000'000'000 + static_cast<TimeMs>(n) * 60000;
  const std::vector<std::pair<RecordKind, nlohmann::json>> documents = {
      {RecordKind::change,
       {{"schema", "kiln.change/1"}, {"id", change_id}, {"layer", "kernels"}, {"owner_team", "kernels-team"},
        {"components", {"gemm-bf16"}}, {"merged_at_ms", at}, {"summary", "gemm: retune the bf16 tiles for long rows"}}},
      {RecordKind::run_request,
       {{"run_id", report_key(n)}, {"tier", "presubmit"}, {"change", change_id}, {"accept", false},
        {"bundle_id", fmt::format("{:064x}", n)}, {"deadline_ms", at + 3'600'000}, {"max_jobs", 32}, {"max_models", 10},
        {"repeats", 10}, {"soak_rounds", 0}}},
      {RecordKind::run_claim,
       {{"run_id", report_key(n)}, {"owner", "qualifier/4242"}, {"lease_ms", 30000}, {"expires_at_ms", at + 30000}}},
  };
  std::vector<kiln::protocol::RecordEntry> records;
  for (const auto& [kind, document] : documents) {
    kiln::protocol::RecordEntry record;
    record.kind = kind;
    record.key = kind == RecordKind::change ? change_id : report_key(n);
    record.seq = 1'000'000'000 + n * 3 + records.size();  // after the reports'
    record.updated_at_ms = at;
    record.written_by = "bench-ci";
    record.document = document.dump();
    records.push_back(std::move(record));
  }
  return records;
}

// A store with `history` jobs: ended ones, every 1,000th a rollout install on the next of the
// nodes, and the last kQueued queued; and `run_reports` qualification run reports with the
// records of their runs (run_records).
kiln::Status fill_store(const fs::path& path, std::size_t history, double doc_kb, std::size_t run_reports,
                        double report_kb) {
  auto store = kiln::coordinator::open_sqlite_store(path.string());
  if (!store) return tl::unexpected(store.error());
  constexpr std::size_t kBatch = 5000;
  for (std::size_t n = 1; n <= run_reports; ++n) {
    if (n % kBatch == 1) {
      if (auto s = (*store)->begin(); !s) return s;
    }
    if (auto s = (*store)->save_record(run_report(n, report_kb)); !s) return s;
    for (const auto& record : run_records(n)) {
      if (auto s = (*store)->save_record(record); !s) return s;
    }
    if (n % kBatch == 0 || n == run_reports) {
      if (auto s = (*store)->commit(); !s) return s;
    }
  }
  for (std::size_t id = 1; id <= history; ++id) {
    if (id % kBatch == 1) {
      if (auto s = (*store)->begin(); !s) return s;
    }
    auto job = ended_job(id, doc_kb);
    if (id % 1000 == 0) {
      job.summary.workload = std::string(kiln::protocol::kInstallWorkload);
      job.summary.submitted_by = std::string(kiln::coordinator::kRolloutSubmitter);
      job.summary.node_id = fmt::format("n{:03}", id / 1000 % kNodes);
      job.requested_node_id = job.summary.node_id;
    }
    if (id + kQueued > history) {
      job.summary.state = kiln::protocol::JobState::queued;
      job.summary.node_id.clear();
      job.started_at_ms = job.finished_at_ms = 0;
    }
    if (auto s = (*store)->save_job(job); !s) return s;
    if (id % kBatch == 0 || id == history) {
      if (auto s = (*store)->commit(); !s) return s;
    }
  }
  return {};
}

struct Start {
  std::size_t jobs_held = 0;  // as its log says it recovered them
  std::optional<std::size_t> records_held;  // none: the coordinator's log did not say
  double serves_after_s = NAN;
  double resident_mb = NAN;
  double get_held_us = NAN;  // get_job of the newest ended job
  double get_old_us = NAN;   // get_job of the oldest: read back from the store unless held
  double get_report_new_us = NAN;  // get_record of the newest run report (with --run-reports)
  double get_report_old_us = NAN;  // and of the oldest
  // Listing the run reports as a qualifier's run read them: every one, oldest first (each run read
  // them all, two or three times), and the latest 100, newest first.
  double list_every_report_ms = NAN;
  double list_latest_100_ms = NAN;
  // The change history as a qualifier's run read it: every change (each run did), and the changes
  // recorded after the newest one it read (what it reads now, as ChangeHistory does).
  double list_every_change_ms = NAN;
  double list_changes_since_ms = NAN;
  // A record named by a prefix of its key (as `kiln bundle show 2c16a9` names a bundle): the
  // records with that prefix, where a client read every record of the kind before.
  double list_by_key_prefix_ms = NAN;
};

// What a coordinator's log says it recovered from its store at start.
void read_recovered(const fs::path& log, Start& start) {
  std::ifstream in(log);
  const std::regex jobs(R"(recovered \d+ nodes, (\d+) jobs)");
  const std::regex records(R"((\d+) qualification records \(the others)");
  std::smatch match;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, match, jobs)) start.jobs_held = std::stoul(match[1].str());
    if (std::regex_search(line, match, records)) {
      start.records_held = std::stoul(match[1].str());
    }
  }
}

struct Row {
  std::size_t history = 0;
  double store_mb = 0;
  double load_live_ms = NAN;
  double load_all_ms = NAN;
  Start live;
  Start every;
};

class Bench {
 public:
  Bench(Settings settings, fs::path dir) : s_(std::move(settings)), dir_(std::move(dir)) {
    server_keys_ = *kiln::generate_keypair();
    client_keys_ = *kiln::generate_keypair();
    (void)kiln::write_keypair((dir_ / "coordinator").string(), server_keys_);
  }

  kiln::Result<Row> run(std::size_t history) {
    Row row;
    row.history = history;
    const fs::path db = dir_ / fmt::format("history-{}.db", history);
    fs::remove(db);
    progress("filling a store with {} jobs of {} KB and {} run reports of {} KB", history, s_.doc_kb, s_.run_reports,
             s_.report_kb);
    if (auto s = fill_store(db, history, s_.doc_kb, s_.run_reports, s_.report_kb); !s) {
      return tl::unexpected(s.error());
    }
    row.store_mb = static_cast<double>(fs::file_size(db)) / 1e6;
    std::vector<double> live_ms, all_ms;
    for (int r = 0; r < s_.repeats; ++r) {
      auto store = kiln::coordinator::open_sqlite_store(db.string());
      if (!store) return tl::unexpected(store.error());
      const auto t0 = std::chrono::steady_clock::now();
      // As the coordinator reads it at start: the reruns of the last window.
      const TimeMs since = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count() -
                           kiln::coordinator::CoordinatorKnobs{}.quarantine_rerun_window_ms;
      if (auto snapshot = (*store)->load_live(s_.held, since); !snapshot) {
        return tl::unexpected(snapshot.error());
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (auto snapshot = (*store)->load(); !snapshot) return tl::unexpected(snapshot.error());
      const auto t2 = std::chrono::steady_clock::now();
      live_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      all_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    row.load_live_ms = kiln::stats::median(live_ms);
    row.load_all_ms = kiln::stats::median(all_ms);
    for (std::size_t held : {s_.held, kEveryJob}) {
      std::vector<Start> starts;
      for (int r = 0; r < s_.repeats; ++r) {
        auto start = start_coordinator(db, history, held);
        if (!start) return tl::unexpected(start.error());
        starts.push_back(*start);
      }
      Start& m = held == kEveryJob ? row.every : row.live;
      // NAN when any start failed to measure it, so that a failure is not hidden by the others.
      auto of = [&](double Start::*field) {
        std::vector<double> values;
        for (const Start& s : starts) {
          if (std::isnan(s.*field)) return static_cast<double>(NAN);
          values.push_back(s.*field);
        }
        return kiln::stats::median(values);
      };
      m = starts.front();
      for (double Start::*field :
           {&Start::serves_after_s, &Start::resident_mb, &Start::get_held_us, &Start::get_old_us,
            &Start::get_report_new_us, &Start::get_report_old_us, &Start::list_every_report_ms,
            &Start::list_latest_100_ms, &Start::list_every_change_ms, &Start::list_changes_since_ms,
            &Start::list_by_key_prefix_ms}) {
        m.*field = of(field);
      }
    }
    return row;
  }

  std::string coordinator_;

 private:
  template <class... Args>
  void progress(fmt::format_string<Args...> format, Args&&... args) {
    std::cerr << fmt::format(format, std::forward<Args>(args)...) << "\n";
  }

  kiln::Result<Start> start_coordinator(const fs::path& db, std::size_t history, std::size_t held) {
    const std::vector<int> ports = kiln::transport::free_loopback_ports(3);
    const std::string client_endpoint = fmt::format("tcp://127.0.0.1:{}", ports[1]);
    const std::string metrics_address = fmt::format("127.0.0.1:{}", ports[2]);
    const fs::path config = dir_ / "coordinator.toml";
    std::ofstream(config) << fmt::format(
        "[coordinator]\nagent_endpoint = \"tcp://127.0.0.1:{}\"\nclient_endpoint = \"{}\"\nsecret_key_file = \"{}\"\n"
        "database = \"{}\"\nlog_level = \"info\"\n\n[knobs]\nended_jobs_in_memory = {}\nmax_jobs_listed = {}\n\n"
        "[http]\nlisten = \"{}\"\n\n[[keys]]\nname = \"bench-developer\"\nrole = \"developer\"\npublic_key = \"{}\"\n",
        ports[0], client_endpoint, (dir_ / "coordinator.key").string(), db.string(), held,
        std::min<std::size_t>(held, 1000), metrics_address, client_keys_.public_key);
    const fs::path log = dir_ / fmt::format("coordinator-{}-{}.log", history, held);
    const TimeMs started = steady_ms();
    const pid_t pid = spawn({coordinator_, "--config", config.string()}, log);
    Start start;
    while (kiln::http::get(metrics_address, "/metrics").status != 200) {
      if (!running(pid)) return tl::unexpected(server_gone("coordinator", log));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    start.serves_after_s = static_cast<double>(steady_ms() - started) / 1000;
    start.resident_mb = resident_mb(pid);
    read_recovered(log, start);
    {
      Requester client(client_endpoint, client_keys_, server_keys_.public_key, false);
      // The median round trip, NAN unless every request was answered with what it asked for.
      auto time_gets = [&](const kiln::protocol::Body& request) {
        std::vector<double> rtts;
        for (int i = 0; i < s_.gets; ++i) {
          auto reply = client.call(request, 5000);
          if (reply && !std::holds_alternative<kiln::protocol::ErrorReply>(reply->body)) rtts.push_back(reply->rtt_us);
        }
        return rtts.size() == static_cast<std::size_t>(s_.gets) ? kiln::stats::median(rtts) : NAN;
      };
      start.get_held_us = time_gets(kiln::protocol::GetJob{history - kQueued});
      start.get_old_us = time_gets(kiln::protocol::GetJob{1});
      if (s_.run_reports > 0) {
        const auto kind = kiln::protocol::RecordKind::qualification_run;
        start.get_report_new_us = time_gets(kiln::protocol::GetRecord{kind, report_key(s_.run_reports)});
        start.get_report_old_us = time_gets(kiln::protocol::GetRecord{kind, report_key(1)});
        // The wall time of paging through a list to its end or `count` records; NAN on an error.
        auto time_list = [&](kiln::protocol::ListRecords query, std::size_t count) {
          const auto begun = std::chrono::steady_clock::now();
          for (std::size_t read = 0; read < count;) {
            auto reply = client.call(query, 60000);
            const auto* page = reply ? std::get_if<kiln::protocol::RecordList>(&reply->body) : nullptr;
            if (page == nullptr) return static_cast<double>(NAN);
            read += page->records.size();
            if (!page->more || page->records.empty()) break;
            (query.newest_first ? query.before_seq : query.after_seq) = page->records.back().seq;
          }
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begun).count();
        };
        start.list_every_report_ms = time_list(kiln::protocol::ListRecords{kind, 10000, 0}, SIZE_MAX);
        start.list_latest_100_ms = time_list(kiln::protocol::ListRecords{kind, 100, 0, 0, true}, 100);
        const auto change = kiln::protocol::RecordKind::change;
        start.list_every_change_ms = time_list(kiln::protocol::ListRecords{change, 10000, 0}, SIZE_MAX);
        auto newest = client.call(kiln::protocol::ListRecords{change, 1, 0, 0, true}, 60000);
        const auto* page = newest ? std::get_if<kiln::protocol::RecordList>(&newest->body) : nullptr;
        if (page != nullptr && !page->records.empty()) {
          start.list_changes_since_ms =
              time_list(kiln::protocol::ListRecords{change, 10000, page->records.front().seq}, SIZE_MAX);
        }
        kiln::protocol::ListRecords by_prefix{change, 2};
        by_prefix.key_prefix = fmt::format("c{:07}", s_.run_reports / 2 + 1);
        start.list_by_key_prefix_ms = time_list(by_prefix, 2);
      }
    }
    stop_process(pid);
    progress("{} jobs stored, {}: served after {:.2f} s with {:.0f} MB resident", history,
             held == kEveryJob ? std::string("every job held") : fmt::format("{} ended ones held at most", held),
             start.serves_after_s, start.resident_mb);
    return start;
  }

  Settings s_;
  fs::path dir_;
  kiln::KeyPair server_keys_;
  kiln::KeyPair client_keys_;
};

nlohmann::json start_json(const Start& s) {
  return {{"jobs_held", s.jobs_held},
          {"records_held", s.records_held ? nlohmann::json(*s.records_held) : nlohmann::json()},
          {"serves_after_s", s.serves_after_s},
          {"resident_mb", s.resident_mb},
          {"get_held_job_us", s.get_held_us},
          {"get_oldest_job_us", s.get_old_us},
          {"get_newest_run_report_us", s.get_report_new_us},
          {"get_oldest_run_report_us", s.get_report_old_us},
          {"list_every_run_report_ms", s.list_every_report_ms},
          {"list_latest_100_run_reports_ms", s.list_latest_100_ms},
          {"list_every_change_ms", s.list_every_change_ms},
          {"list_changes_since_newest_ms", s.list_changes_since_ms},
          {"list_change_by_key_prefix_ms", s.list_by_key_prefix_ms}};
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"what a coordinator's start-up and memory cost as its store's history grows: holding the live jobs "
               "only, against holding every job"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-history"));
  app.add_option("--jobs", s.history, "history sizes (jobs stored), comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(100, 10'000'000));
  app.add_option("--doc-kb", s.doc_kb, "the size of each stored job's document, in KB (the demo's average: 11)")
      ->check(CLI::Range(0.5, 1024.0));
  app.add_option("--run-reports", s.run_reports,
                 "finished runs stored besides the jobs, each its change, request, claim and report")
      ->check(CLI::Range(0, 10'000'000));
  app.add_option("--report-kb", s.report_kb, "the size of each run report, in KB (the demo's presubmit runs: 28)")
      ->check(CLI::Range(0.5, 700.0));
  app.add_option("--held", s.held, "ended_jobs_in_memory for the live run (default: the coordinator's default)")
      ->check(CLI::Range(1, 10'000'000));
  app.add_option("--repeats", s.repeats, "starts per row; the figures are their medians")->check(CLI::Range(1, 100));
  app.add_option("--gets", s.gets, "get_job round trips timed per job and start")->check(CLI::Range(1, 100000));
  app.add_option("--coordinator", s.coordinator, "the kiln-coordinator to run (default: beside this program)");
  app.add_flag("--json", s.json, "print the figures as JSON");
  app.add_flag("--keep", s.keep, "keep the temporary directory (config, logs, stores)");
  CLI11_PARSE(app, argc, argv);
  auto coordinator = coordinator_to_run(s.coordinator);
  if (!coordinator) {
    std::cerr << coordinator.error().message << "\n";
    return 2;
  }
  s.coordinator = *coordinator;
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln-bench-history-{}", ::getpid());
  fs::create_directories(dir);
  std::vector<Row> rows;
  {
    Bench bench(s, dir);
    bench.coordinator_ = s.coordinator;
    for (std::size_t history : s.history) {
      auto row = bench.run(history);
      if (!row) {
        std::cerr << row.error().message << "\nthe bench's files are kept in " << dir.string() << "\n";
        return 1;
      }
      rows.push_back(*row);
    }
  }
  if (s.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      out.push_back({{"jobs_stored", r.history},
                     {"run_reports_stored", s.run_reports},
                     {"store_mb", r.store_mb},
                     {"ended_jobs_held", s.held},
                     {"load_live_ms", r.load_live_ms},
                     {"load_every_job_ms", r.load_all_ms},
                     {"live", start_json(r.live)},
                     {"every_job", start_json(r.every)},
                     {"start_every_job_vs_live", r.every.serves_after_s / r.live.serves_after_s}});
    }
    std::cout << out.dump(2) << "\n";
  } else {
    fmt::print("{} KB a job, {} queued; medians of {} starts (get_job: of {} round trips each)\n", s.doc_kb, kQueued,
               s.repeats, s.gets);
    fmt::print("{:>9} {:>9} | {:>21} | {:>27} | {:>27} | {:>11} | {:>23}\n", "stored", "store MB", "held (live / all)",
               "serves after s (live / all)", "resident MB (live / all)", "get new us", "get oldest us (live/all)");
    for (const Row& r : rows) {
      fmt::print("{:>9} {:>9.0f} | {:>9} / {:>9} | {:>12.2f} / {:>12.2f} | {:>12.0f} / {:>12.0f} | {:>11.0f} | {:>10.0f} / "
                 "{:>10.0f}\n",
                 r.history, r.store_mb, r.live.jobs_held, r.every.jobs_held, r.live.serves_after_s,
                 r.every.serves_after_s, r.live.resident_mb, r.every.resident_mb, r.live.get_held_us, r.live.get_old_us,
                 r.every.get_old_us);
      fmt::print("{:>9} {:>9} | the store read at start: {:.0f} ms for the live jobs ({} ended held), {:.0f} ms for every "
                 "job\n",
                 "", "", r.load_live_ms, s.held, r.load_all_ms);
      if (s.run_reports > 0) {
        fmt::print("{:>9} {:>9} | {} run reports of {} KB stored, with their runs' change, request and claim: {} records "
                   "held; get_record of the newest {:.0f} us, of the oldest {:.0f} us; listing every "
                   "report {:.0f} ms, the latest 100 newest first {:.0f} ms; listing every change {:.1f} ms, the "
                   "changes since the newest {:.1f} ms, a change by a prefix of its key {:.1f} ms\n",
                   "", "", s.run_reports, s.report_kb, r.live.records_held.value_or(0),
                   r.live.get_report_new_us, r.live.get_report_old_us, r.live.list_every_report_ms,
                   r.live.list_latest_100_ms, r.live.list_every_change_ms, r.live.list_changes_since_ms,
                   r.live.list_by_key_prefix_ms);
      }
    }
  }
  if (!s.keep) fs::remove_all(dir);
  return 0;
}
