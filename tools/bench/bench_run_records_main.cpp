// kiln-bench-run-records: what a qualification night of many model runs costs to store and to read
// (docs/performance.md, "Run records"). Starts the real kiln-coordinator on a SQLite store, writes
// a night made from the demo's (demo_night.h) through the qualifier's writer (RunRecorder: the
// model runs, then the header) and reads it back whole as `kiln run ID` does (the header, then the
// model runs a page at a time). Prints the bytes stored (the header, the largest model run record,
// all of them), the time to write the run, to record its progress with 10 model runs changed (what
// the qualifier does every few seconds), and to read it whole: medians of the repeats, each a run
// of its own.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/keys.h"
#include "common/stats/shift.h"
#include "common/transport/loopback_ports.h"
#include "common/version.h"
#include "tools/bench/bench_process.h"
#include "tools/bench/demo_night.h"
#include "records/run_records.h"
#include "client/records_client.h"

namespace fs = std::filesystem;
namespace qs = kiln::qualification::shell;
using namespace kiln::bench;

namespace {

struct Settings {
  std::size_t models = 1000;
  int repeats = 5;
  std::string coordinator;
  std::string source = KILN_SOURCE_DIR;
  bool keep = false;
};

struct Figures {
  std::size_t header_bytes = 0;
  std::size_t largest_model_bytes = 0;
  std::size_t total_bytes = 0;
  std::size_t one_record_bytes = 0;  // the report as one record, as it was stored before
  std::vector<double> write_ms, progress_ms, read_ms;
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

kiln::Status measure(const Settings& s, const fs::path& dir, const nlohmann::json& demo, Figures& figures) {
  const auto server_keys = *kiln::generate_keypair();
  const auto client_keys = *kiln::generate_keypair();
  if (auto ok = kiln::write_keypair((dir / "coordinator").string(), server_keys); !ok) return ok;
  if (auto ok = kiln::write_keypair((dir / "ci").string(), client_keys); !ok) return ok;
  const std::vector<int> ports = kiln::transport::free_loopback_ports(2);
  const std::string client_endpoint = fmt::format("tcp://127.0.0.1:{}", ports[1]);
  const fs::path config = dir / "coordinator.toml";
  std::ofstream(config) << fmt::format(
      "[coordinator]\nagent_endpoint = \"tcp://127.0.0.1:{}\"\nclient_endpoint = \"{}\"\nsecret_key_file = \"{}\"\n"
      "database = \"{}\"\nlog_level = \"warn\"\n\n[[keys]]\nname = \"bench-ci\"\nrole = \"ci\"\npublic_key = \"{}\"\n",
      ports[0], client_endpoint, (dir / "coordinator.key").string(), (dir / "records.db").string(),
      client_keys.public_key);
  const fs::path log = dir / "coordinator.log";
  const pid_t pid = spawn({s.coordinator, "--config", config.string()}, log);
  kiln::cli::ClientConfig client_config;
  client_config.coordinator_endpoint = client_endpoint;
  client_config.coordinator_public_key_file = (dir / "coordinator.pub").string();
  client_config.secret_key_file = (dir / "ci.key").string();
  client_config.timeout_ms = 60000;
  auto client = kiln::cli::Client::connect(client_config);
  if (!client) {
    stop_process(pid);
    return tl::unexpected(client.error());
  }
  kiln::Status status;
  for (int r = 0; r < s.repeats && status; ++r) {
    const std::string run_id = fmt::format("nightly-bench-{}", r);
    nlohmann::json night = night_of(demo, run_id, s.models);
    qs::RunRecorder recorder;
    auto start = std::chrono::steady_clock::now();
    status = recorder.record(**client, run_id, night);
    if (!status) break;
    figures.write_ms.push_back(ms_since(start));
    // A progress record: ten model runs changed since the last.
    for (std::size_t i = 0; i < std::min<std::size_t>(10, s.models); ++i) {
      night["models"][i * (s.models / 10)]["duration_ms"] = 1 + r;
    }
    night["jobs_started"] = night.value("jobs_started", 0) + 1;
    start = std::chrono::steady_clock::now();
    status = recorder.record(**client, run_id, night);
    if (!status) break;
    figures.progress_ms.push_back(ms_since(start));
    start = std::chrono::steady_clock::now();
    auto read = qs::get_run(**client, run_id);
    if (!read) {
      status = tl::unexpected(read.error());
      break;
    }
    figures.read_ms.push_back(ms_since(start));
    if (read->at("models") != night.at("models")) {
      status = kiln::fail(kiln::Errc::integrity, fmt::format("run {} read back is not the run written", run_id));
      break;
    }
    const auto records = kiln::qualification::split_run(night);
    figures.header_bytes = records->header.dump().size();
    figures.total_bytes = figures.header_bytes;
    figures.largest_model_bytes = 0;
    for (const auto& model : records->models) {
      const std::size_t bytes = model.document.dump().size();
      figures.largest_model_bytes = std::max(figures.largest_model_bytes, bytes);
      figures.total_bytes += bytes;
    }
    figures.one_record_bytes = night.dump().size();
  }
  client->reset();
  stop_process(pid);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  CLI::App app{"what a qualification night of many model runs costs to store on the coordinator and to read back"};
  app.set_version_flag("--version", kiln::version_text("kiln-bench-run-records"));
  app.add_option("--models", s.models, "model runs in the night")->check(CLI::Range(1, 100000));
  app.add_option("--repeats", s.repeats, "runs written and read; the times are their medians")
      ->check(CLI::Range(1, 100));
  app.add_option("--coordinator", s.coordinator, "the kiln-coordinator to run (default: beside this program)");
  app.add_option("--source", s.source, "the kiln source tree (its tools/bench/data/demo-night.json)");
  app.add_flag("--keep", s.keep, "keep the temporary directory (config, log, store)");
  CLI11_PARSE(app, argc, argv);
  auto coordinator = coordinator_to_run(s.coordinator);
  if (!coordinator) {
    std::cerr << coordinator.error().message << "\n";
    return 2;
  }
  s.coordinator = *coordinator;
  auto demo = read_demo_night(s.source);
  if (!demo) {
    std::cerr << demo.error().message << "\n";
    return 2;
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("kiln-bench-run-records-{}", ::getpid());
  fs::create_directories(dir);
  Figures figures;
  if (auto ok = measure(s, dir, *demo, figures); !ok) {
    std::cerr << ok.error().message << "\nthe bench's files are kept in " << dir.string() << "\n";
    return 1;
  }
  fmt::print("a night of {} model runs (made from the demo's), medians of {} runs\n", s.models, s.repeats);
  fmt::print("stored: header {:.1f} KB, largest model run record {:.1f} KB, all {:.1f} KB in {} records (as one "
             "record it would be {:.1f} KB, of the 768 KiB a record holds)\n",
             static_cast<double>(figures.header_bytes) / 1000, static_cast<double>(figures.largest_model_bytes) / 1000,
             static_cast<double>(figures.total_bytes) / 1000, s.models + 1,
             static_cast<double>(figures.one_record_bytes) / 1000);
  fmt::print("write the run: {:.0f} ms; record its progress, 10 model runs changed: {:.1f} ms; read it whole: {:.0f} "
             "ms\n",
             kiln::stats::median(figures.write_ms), kiln::stats::median(figures.progress_ms),
             kiln::stats::median(figures.read_ms));
  if (!s.keep) fs::remove_all(dir);
  return 0;
}
