#include "cli/commands/qualification_run.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/text.h"
#include "cli/wait_progress.h"
#include "qualification/run_report.h"
#include "records/run_request.h"
#include "qualification/run_service.h"
#include "qualification/run_verdict.h"
#include "client/records_client.h"
#include "qualification/shell/lapsed_waivers.h"

namespace kiln::cli {

namespace fs = std::filesystem;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

// "nightly-20261130T073412-3dbff4cc": the tier, the time to the second and the bundle.
std::string default_run_id(q::Tier tier, const q::Bundle& candidate, TimeMs now_ms) {
  const std::time_t seconds = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &tm);
  return fmt::format("{}-{}-{}", q::to_string(tier), stamp, candidate.id.substr(0, 8));
}

// How often a waiting client reads the run's report, how often it looks at what the run waits
// for, and when it says that nobody drives it.
constexpr auto kFollowInterval = std::chrono::milliseconds(500);
constexpr auto kProgressInterval = std::chrono::seconds(2);
constexpr auto kUndrivenNotice = std::chrono::seconds(30);

// Follows the run's report until it is finished; a report not recorded yet is waited for. Unless
// quiet, says what the run waits for (wait_progress.h).
Result<nlohmann::json> follow(Client& client, const std::string& run_id, bool quiet) {
  const auto since = std::chrono::steady_clock::now();
  const TimeMs started_ms = wall_now_ms();
  ProgressLine progress = ProgressLine::for_stderr();
  auto last_look = since - kProgressInterval;
  while (true) {
    auto report = qs::get_run(client, run_id);
    if (report && report->value("finished", false)) return report;
    if (!report && report.error().code != Errc::not_found) return report;
    const auto now = std::chrono::steady_clock::now();
    if (!quiet && now - last_look >= kProgressInterval) {
      last_look = now;
      const TimeMs now_ms = wall_now_ms();
      if (report) {
        progress.show_lines(run_status_lines(*report, read_fleet(client, now_ms)), now_ms - started_ms, now_ms);
      } else {
        progress.show(fmt::format("run {}: recorded, waiting for a qualifier to take it up{}", run_id,
                                  now - since > kUndrivenNotice
                                      ? "; none has yet: is kiln-qualifier running (docs/operations.md)?"
                                      : ""),
                      now_ms - started_ms, now_ms);
      }
    }
    std::this_thread::sleep_for(kFollowInterval);
  }
}

Status write_junit(const std::string& path, const nlohmann::json& document) {
  auto outline = q::report_outline_from_json(document);
  if (!outline) return tl::unexpected(outline.error());
  std::ofstream out(path, std::ios::trunc);
  out << q::to_junit_xml(*outline);
  if (!out) return fail(Errc::io, fmt::format("cannot write {}; check the path", path));
  return {};
}

// What the coordinator's records already say of the request (run_service.h): a run that cannot be
// carried out is refused when it is asked (exit 2), never started. A run asked for before (the same
// command following it) is not checked again: the baselines may have moved on since.
Status check_request(Client& client, const q::RunRequest& request, const q::Bundle& candidate) {
  if (qs::get_run(client, request.run_id)) return {};
  if (request.tier == q::Tier::smoke && !request.change.empty()) {
    auto change = expect_reply<protocol::RecordEntry>(
        client.request(protocol::GetRecord{protocol::RecordKind::change, request.change}));
    if (!change && change.error().code != Errc::not_found) return tl::unexpected(change.error());
    if (auto ok = q::check_change_under_test(request.change, change.has_value()); !ok) return ok;
  }
  auto baselines = qs::list_baselines(client);
  if (!baselines) return tl::unexpected(baselines.error());
  std::map<std::string, q::Bundle> compared;
  for (const auto& revision : candidate.hardware_revisions) {
    const auto baseline = baselines->find(revision);
    if (baseline == baselines->end() || baseline->second.bundle_id == candidate.id) continue;
    auto bundle = qs::get_bundle(client, baseline->second.bundle_id);
    if (bundle) compared.emplace(revision, std::move(*bundle));
  }
  return q::check_not_older_than_baselines(candidate, compared);
}

}  // namespace

Status check_run_locally(const RunOptions& options) { return check_output_path("--junit", options.junit_path); }

// Opens the file for appending (creating it only to remove it again), so nothing is lost.
Status check_output_path(std::string_view option, const std::string& path) {
  if (path.empty()) return {};
  const bool existed = fs::exists(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fail(Errc::config, fmt::format("{} {}: cannot write there ({}); give a path in a writable directory", option,
                                          path, std::strerror(errno)));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
  return {};
}

int run_qualification(const RunOptions& options, q::Tier tier, Client& client, bool json) {
  auto candidate = qs::find_bundle(client, options.bundle);
  if (!candidate) return report(candidate.error());
  q::RunRequest request;
  request.run_id = !options.run_id.empty() ? options.run_id : default_run_id(tier, *candidate, wall_now_ms());
  request.tier = tier;
  request.bundle_id = candidate->id;
  request.change = options.change;
  request.repeats = options.repeats;
  request.max_jobs = options.max_jobs;
  request.max_models = options.max_models;
  request.soak_rounds = tier == q::Tier::release ? options.soak_rounds : 0;
  request.accept = !options.no_accept;
  if (!options.perf_rule.empty()) request.perf_rule = enum_from_name<stats::GateRule>(options.perf_rule);
  if (auto ok = check_request(client, request, *candidate); !ok) return report(ok.error());
  if (auto ok = qs::request_run(client, request); !ok) {
    if (ok.error().code != Errc::conflict) return report(ok.error());
    return report({Errc::invalid_argument, fmt::format("run {} was asked for before with other options; run the same "
                                               "command to follow it, or give a new --run-id",
                                               request.run_id)});
  }
  if (!options.wait) {
    if (json) std::cout << nlohmann::json{{"run_id", request.run_id}}.dump() << "\n";
    else std::cout << fmt::format("run {} requested; follow it with `kiln run {}`\n", request.run_id, request.run_id);
    return kExitOk;
  }
  std::cerr << fmt::format("run {} requested; waiting for its verdict (`kiln run {}` shows progress)\n",
                           request.run_id, request.run_id);
  return follow_to_verdict(client, request.run_id, options.junit_path, json);
}

int follow_to_verdict(Client& client, const std::string& run_id, const std::string& junit_path, bool json) {
  auto document = follow(client, run_id, json);
  if (!document) return report(document.error());
  // The verdict by the waivers in force now, not those the report was recorded with.
  if (auto ok = qs::revoke_lapsed_waivers(client, *document, wall_now_ms()); !ok) return report(ok.error());
  if (!junit_path.empty()) {
    if (auto ok = write_junit(junit_path, *document); !ok) return report(ok.error());
  }
  if (json) std::cout << document->dump(2) << "\n";
  else std::cout << document->value("summary", std::string());
  return verdict_exit_code(*document);
}

int verdict_exit_code(const nlohmann::json& report) {
  const q::RunVerdict verdict = q::run_verdict(report);
  if (verdict.word == "failed") return kExitFailed;
  if (verdict.word != "error") return kExitOk;
  std::cerr << fmt::format("kiln: run {} could not be carried out, which says nothing of the bundle: {}\n",
                           report.value("run_id", ""), verdict.reason);
  return kExitUsage;
}

}  // namespace kiln::cli
