#include "coordinator/cli/kiln_cli.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/keys.h"
#include "common/numerics/compare_cli.h"
#include "common/protocol/json.h"
#include "common/stats/compare_cli.h"
#include "coordinator/cli/client.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/cli/qualify_commands.h"

namespace kiln::cli {
namespace {

using protocol::Body;

std::string config_path_default() {
  if (const char* env = std::getenv("KILN_CONFIG")) return env;
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.config/kiln/client.toml";
  return "client.toml";
}

std::string human_duration(std::uint64_t ms) {
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60000) return fmt::format("{:.1f}s", ms / 1000.0);
  if (ms < 3600000) return fmt::format("{}m{:02}s", ms / 60000, (ms / 1000) % 60);
  return fmt::format("{}h{:02}m", ms / 3600000, (ms / 60000) % 60);
}

void print_nodes(const protocol::NodeList& list) {
  if (list.nodes.empty()) {
    std::cout << "no nodes have registered yet\n";
    return;
  }
  std::cout << fmt::format("{:<12} {:<9} {:<4} {:>5} {:>5} {:>9}  {}\n", "NODE", "STATE", "REV", "FREE", "USED",
                           "SEEN", "AGENT/DRIVER");
  for (const auto& n : list.nodes) {
    std::cout << fmt::format("{:<12} {:<9} {:<4} {:>5} {:>5} {:>9}  {}/{}\n", n.node_id, protocol::enum_name(n.state),
                             n.hardware_revision, n.chips_total - n.chips_used, n.chips_used,
                             human_duration(n.last_seen_ms_ago) + " ago", n.agent_version, n.driver_version);
  }
}

void print_jobs(const protocol::JobList& list) {
  if (list.jobs.empty()) {
    std::cout << "no jobs\n";
    return;
  }
  std::cout << fmt::format("{:>6} {:<10} {:<11} {:<14} {:>5} {:<10} {:>9}  {}\n", "JOB", "STATE", "CLASS", "WORKLOAD",
                           "CHIPS", "NODE", "TOOK", "DETAIL");
  for (const auto& j : list.jobs) {
    std::cout << fmt::format("{:>6} {:<10} {:<11} {:<14} {:>5} {:<10} {:>9}  {}\n", j.job_id,
                             protocol::enum_name(j.state), protocol::enum_name(j.priority_class), j.workload, j.chips,
                             j.node_id.empty() ? "-" : j.node_id,
                             j.duration_ms ? human_duration(j.duration_ms) : "-", j.detail);
  }
}

void print_job_detail(const protocol::JobDetail& d) {
  const auto& j = d.job;
  std::cout << fmt::format("job {}: {}\n", j.job_id, protocol::enum_name(j.state));
  std::cout << fmt::format("  workload   {} {}\n", j.workload, fmt::join(j.args, " "));
  std::cout << fmt::format("  class      {}, submitted by {}\n", protocol::enum_name(j.priority_class), j.submitted_by);
  std::cout << fmt::format("  placement  {} chips{}{}\n", j.chips,
                           j.node_id.empty() ? "" : " on " + j.node_id,
                           j.chip_indices.empty() ? "" : fmt::format(" [{}]", fmt::join(j.chip_indices, ",")));
  std::cout << fmt::format("  attempt    {} of {}\n", j.attempt, j.max_attempts);
  if (protocol::is_terminal(j.state)) {
    std::cout << fmt::format("  exit code  {} after {}\n", j.exit_code, human_duration(j.duration_ms));
  }
  if (!j.detail.empty()) std::cout << fmt::format("  detail     {}\n", j.detail);
  if (!d.result.empty()) std::cout << "  result\n    " << d.result << "\n";
  if (!d.output_tail.empty()) {
    std::cout << "  output (tail)\n";
    std::size_t start = 0;
    while (start < d.output_tail.size()) {
      auto end = d.output_tail.find('\n', start);
      if (end == std::string::npos) end = d.output_tail.size();
      std::cout << "    " << d.output_tail.substr(start, end - start) << "\n";
      start = end + 1;
    }
  }
}

struct Common {
  std::string config_path = config_path_default();
  bool json = false;
};

// Polls a job until it ends; prints state changes unless quiet.
Result<protocol::JobDetail> wait_for_job(Client& client, std::uint64_t job_id, bool quiet) {
  protocol::JobState last = protocol::JobState::queued;
  bool first = true;
  while (true) {
    auto detail = expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{job_id}));
    if (!detail) return detail;
    if (!quiet && (first || detail->job.state != last)) {
      std::cerr << fmt::format("job {}: {}{}\n", job_id, protocol::enum_name(detail->job.state),
                               detail->job.node_id.empty() ? "" : " on " + detail->job.node_id);
    }
    first = false;
    last = detail->job.state;
    if (protocol::is_terminal(detail->job.state)) return detail;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// "L3", "l3" or "3".
Result<std::uint64_t> parse_lease_id(const std::string& text) {
  std::string digits = text;
  if (!digits.empty() && (digits[0] == 'L' || digits[0] == 'l')) digits.erase(0, 1);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos ||
      std::stoull(digits) == 0) {
    return fail(Errc::invalid_argument, fmt::format("'{}' is not a lease id; lease ids look like L3 (see `kiln leases`)",
                                                    text));
  }
  return std::stoull(digits);
}

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "14:05 (in 1h59m)" for a coordinator wall-clock time.
std::string when_text(std::uint64_t at_ms) {
  if (at_ms == 0) return "-";
  const std::time_t seconds = static_cast<std::time_t>(at_ms / 1000);
  std::tm local{};
  ::localtime_r(&seconds, &local);
  const std::int64_t left = static_cast<std::int64_t>(at_ms) - wall_now_ms();
  return fmt::format("{:02}:{:02} ({})", local.tm_hour, local.tm_min,
                     left >= 0 ? "in " + human_duration(static_cast<std::uint64_t>(left))
                               : human_duration(static_cast<std::uint64_t>(-left)) + " ago");
}

std::string placement_text(const protocol::LeaseSummary& l) {
  if (l.placement.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& p : l.placement) parts.push_back(fmt::format("{}[{}]", p.node_id, fmt::join(p.chip_indices, ",")));
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string ask_text(const protocol::LeaseSummary& l) {
  std::string what = l.nodes > 0 ? fmt::format("{} nodes", l.nodes) : fmt::format("{} chips", l.chips);
  return what + (l.hardware_revision.empty() ? "" : " rev " + l.hardware_revision);
}

void print_leases(const protocol::LeaseList& list) {
  if (list.leases.empty()) {
    std::cout << "no leases\n";
    return;
  }
  std::cout << fmt::format("{:<6} {:<10} {:<10} {:<12} {:<14} {:<24} {:<22} {}\n", "LEASE", "STATE", "CLASS", "OWNER",
                           "ASKED", "PLACEMENT", "EXPIRES", "JOBS");
  for (const auto& l : list.leases) {
    std::cout << fmt::format("{:<6} {:<10} {:<10} {:<12} {:<14} {:<24} {:<22} {}\n", fmt::format("L{}", l.lease_id),
                             protocol::enum_name(l.state), protocol::enum_name(l.priority_class), l.owner, ask_text(l),
                             placement_text(l), l.state == protocol::LeaseState::granted ? when_text(l.expires_at_ms) : "-",
                             l.job_ids.empty() ? "-" : fmt::format("{}", fmt::join(l.job_ids, ",")));
    if (l.state != protocol::LeaseState::granted && !l.detail.empty()) std::cout << "       " << l.detail << "\n";
  }
}

void print_granted(const protocol::LeaseSummary& l) {
  std::cout << fmt::format("lease L{} granted: {} ({}), expires at {}\n", l.lease_id, placement_text(l), ask_text(l),
                           when_text(l.expires_at_ms));
  for (const auto& p : l.placement) {
    std::cout << fmt::format("  node {}  chips {}\n", p.node_id, fmt::join(p.chip_indices, ","));
  }
  std::cout << fmt::format("  run jobs in it with `kiln submit --lease L{} ...`; release it with `kiln release-lease "
                           "L{}`\n",
                           l.lease_id, l.lease_id)
            << std::flush;
}

struct LeaseWatchOptions {
  bool detach = false;  // return once granted
  bool json = false;
  std::uint32_t wait_ms = 5000;
};

// Follows a lease until it ends (or, detached, until it is granted), printing what happens:
// progress while pending, the grant, preemption notices.
int follow_lease(Client& client, const protocol::LeaseSummary& start, const LeaseWatchOptions& options) {
  std::uint64_t seq = start.event_seq;  // what the request's reply already showed
  std::string last_status;
  const std::uint64_t id = start.lease_id;
  while (true) {
    auto event = expect_reply<protocol::LeaseEvent>(client.request(protocol::WatchLease{id, seq, options.wait_ms}));
    if (!event) return report(event.error());
    seq = std::max(seq, event->seq);
    if (options.json && event->kind != protocol::LeaseEventKind::status) {
      std::cout << protocol::to_json(*event).dump() << "\n" << std::flush;
    }
    switch (event->kind) {
      case protocol::LeaseEventKind::status:
        if (event->lease.state == protocol::LeaseState::pending && event->message != last_status) {
          std::cerr << fmt::format("lease L{} waiting: {}\n", id, event->message);
          last_status = event->message;
        }
        break;
      case protocol::LeaseEventKind::granted:
        last_status.clear();
        if (!options.json) print_granted(event->lease);
        if (options.detach) return kExitOk;
        break;
      case protocol::LeaseEventKind::preempt_notice:
        if (!options.json) {
          std::cout << fmt::format("PREEMPTION NOTICE for lease L{}: {}\n", id, event->message) << std::flush;
        }
        break;
      case protocol::LeaseEventKind::requeued:
        if (!options.json) std::cout << fmt::format("lease L{} {}\n", id, event->message) << std::flush;
        break;
      case protocol::LeaseEventKind::ended:
        if (!options.json) std::cout << fmt::format("lease L{} ended: {}\n", id, event->message) << std::flush;
        return kExitOk;
    }
    if (event->lease.state == protocol::LeaseState::ended && event->kind == protocol::LeaseEventKind::status) {
      if (!options.json) std::cout << fmt::format("lease L{} ended: {}\n", id, event->lease.detail) << std::flush;
      return kExitOk;
    }
  }
}

}  // namespace

int run_kiln(int argc, char** argv) {
  CLI::App app{"kiln: model CI on your accelerators. Talks to kiln-coordinator."};
  app.require_subcommand(1);
  app.fallthrough();  // --config and --json may also follow the subcommand
  Common common;
  app.add_option("--config", common.config_path, "client.toml (default: $KILN_CONFIG or ~/.config/kiln/client.toml)");
  app.add_flag("--json", common.json, "print machine-readable JSON");

  // keygen
  auto* keygen = app.add_subcommand("keygen", "write a CURVE keypair: NAME.key (secret, mode 0600) and NAME.pub");
  std::string keygen_out;
  keygen->add_option("--out", keygen_out, "path prefix of the two files")->required();

  auto* whoami = app.add_subcommand("whoami", "show the key name and role the coordinator knows you by");
  auto* nodes = app.add_subcommand("nodes", "list nodes: state, hardware revision, chips free and used");

  auto* submit = app.add_subcommand("submit", "submit a job: a workload the agents know, on N chips");
  protocol::SubmitJob submit_req;
  std::string submit_class = "experiment";
  bool submit_wait = false;
  submit->add_option("--workload", submit_req.workload, "workload name (from the agents' [workloads])")->required();
  submit->add_option("--chips", submit_req.chips, "chips on one node")->capture_default_str();
  submit->add_option("--rev", submit_req.hardware_revision, "hardware revision (default: any)");
  submit->add_option("--node", submit_req.node_id, "run on this node only");
  submit->add_option("--class", submit_class, "release, presubmit, bisect, nightly or experiment")->capture_default_str();
  submit->add_option("--timeout-ms", submit_req.timeout_ms, "hard deadline of one attempt")->capture_default_str();
  submit->add_option("--max-attempts", submit_req.max_attempts, "attempts when a node is lost mid-run")->capture_default_str();
  submit->add_option("--seed", submit_req.seed, "seed passed to the workload")->capture_default_str();
  // A benchmark: warmup until steady, then timed repeats (docs/workloads.md).
  auto& bench = submit_req.benchmark;
  submit->add_option("--repeats", bench.repeats, "run as a benchmark with this many timed repeats")
      ->group("Benchmark");
  submit->add_option("--warmup-min", bench.warmup_min, "warmup iterations always run")
      ->capture_default_str()
      ->group("Benchmark");
  submit->add_option("--warmup-max", bench.warmup_max, "give up waiting for steady after this many")
      ->capture_default_str()
      ->group("Benchmark");
  submit->add_option("--steady-window", bench.steady_window, "steady: this many last throughputs agree")
      ->capture_default_str()
      ->group("Benchmark");
  submit->add_option("--steady-tolerance-ppm", bench.steady_tolerance_ppm,
                     "steady: their relative spread, in millionths")
      ->capture_default_str()
      ->group("Benchmark");
  submit->add_flag("--wait", submit_wait, "wait for the job to end; the exit code says whether it succeeded");
  std::string submit_lease;
  submit->add_option("--lease", submit_lease, "run inside this lease of yours (L3), on its chips");
  submit->add_option("args", submit_req.args, "arguments for the workload (after --)");

  auto* jobs = app.add_subcommand("jobs", "list recent jobs");
  protocol::ListJobs jobs_req;
  jobs->add_option("--limit", jobs_req.limit, "how many")->capture_default_str();
  jobs->add_flag("--active", jobs_req.active_only, "only queued and running jobs");

  auto* result = app.add_subcommand("result", "show one job: state, placement, result and output");
  std::uint64_t result_id = 0;
  bool result_wait = false;
  result->add_option("ID", result_id, "job id")->required();
  result->add_flag("--wait", result_wait, "wait until the job ends");

  auto* cancel = app.add_subcommand("cancel", "cancel a job (yours, or any as ops/admin)");
  std::uint64_t cancel_id = 0;
  cancel->add_option("ID", cancel_id, "job id")->required();

  auto* diag = app.add_subcommand("diag", "run diagnostics on a node through the coordinator, which drains it first "
                                          "(lab, ops, admin); exit 0 pass or warn, 1 fail");
  std::string diag_node;
  int diag_level = 1;
  bool diag_no_wait = false;
  diag->add_option("--node", diag_node, "node id")->required();
  diag->add_option("--level", diag_level, "1: seconds; 2: adds memory and interconnect; 3: adds compute stress")
      ->check(CLI::Range(1, 3))
      ->capture_default_str();
  diag->add_flag("--no-wait", diag_no_wait, "print the job id and return at once");

  auto* drain = app.add_subcommand("drain", "stop dispatching new work to a node (ops, lab, admin)");
  protocol::DrainNode drain_req;
  drain->add_option("NODE", drain_req.node_id, "node id")->required();
  drain->add_option("--reason", drain_req.reason, "why, for the people who look later");
  auto* undrain = app.add_subcommand("undrain", "resume dispatching to a drained node (ops, lab, admin)");
  std::string undrain_node;
  undrain->add_option("NODE", undrain_node, "node id")->required();

  auto* lease = app.add_subcommand(
      "lease", "lease chips for an experiment: waits, prints what it got, then watches for preemption notices "
               "until the lease ends");
  protocol::RequestLease lease_req;
  double lease_hours = 0;
  double lease_minutes = 0;
  std::string lease_class = "experiment";
  bool lease_detach = false;
  bool lease_no_wait = false;
  bool lease_wait_notice = false;
  lease->add_option("--chips", lease_req.chips, "chips on one node: 1, 2, 4 or 8")->capture_default_str();
  lease->add_option("--nodes", lease_req.nodes, "whole nodes instead of chips, all or nothing");
  lease->add_option("--rev", lease_req.hardware_revision, "hardware revision (default: any)");
  lease->add_option("--hours", lease_hours, "how long to hold the chips");
  lease->add_option("--minutes", lease_minutes, "how long to hold the chips (adds to --hours)");
  double lease_start_in_minutes = 0;
  lease->add_option("--start-in-minutes", lease_start_in_minutes,
                    "book a window ahead (a release qualification): the nodes are held for it from now on");
  lease->add_option("--class", lease_class, "priority class (developers lease as experiment)")->capture_default_str();
  lease->add_flag("--detach", lease_detach, "exit once granted instead of watching for notices");
  lease->add_flag("--no-wait", lease_no_wait, "exit at once with the lease id, granted or pending");
  lease->add_flag("--wait-notice", lease_wait_notice, "keep watching after the grant for a preemption notice (default)");

  auto* leases = app.add_subcommand("leases", "list the pending and granted leases");
  bool leases_all = false;
  leases->add_flag("--all", leases_all, "also recently ended leases");

  auto* release_lease = app.add_subcommand("release-lease", "release a lease (yours, or any as ops/admin)");
  std::string release_lease_id;
  release_lease->add_option("ID", release_lease_id, "lease id, e.g. L3")->required();

  auto* queue = app.add_subcommand("queue", "explain why a job or lease is pending and when it should start");
  std::string queue_why_id;
  queue->add_option("--why", queue_why_id, "a job id (42) or a lease id (L3)")->required();

  // Local tools: they read files and never talk to the coordinator.
  auto* compare_tensors = app.add_subcommand(
      "compare-tensors", "compare an output tensor (.npy, .safetensors) with its golden reference under the "
                         "dtype's tolerance; exit 0 within tolerance, 1 mismatch, 2 input error");
  numerics::CompareTensorsArgs compare_tensors_args;
  numerics::add_compare_tensors_options(*compare_tensors, compare_tensors_args);

  auto* compare = app.add_subcommand(
      "compare", "the performance gate on your own samples (one number per line): Mann-Whitney U, "
                 "Hodges-Lehmann shift and interval; exit 0 no regression, 1 regression, 2 input error, "
                 "3 inconclusive");
  stats::CompareSamplesArgs compare_args;
  bool lower_is_better = false;
  compare->add_option("BASELINE", compare_args.baseline_path, "baseline samples file")->required();
  compare->add_option("CANDIDATE", compare_args.candidate_path, "candidate samples file")->required();
  compare->add_flag("--lower-is-better", lower_is_better, "smaller numbers are better (latency)");
  compare->add_option("--min-effect", compare_args.min_effect, "smallest relative change that matters")
      ->capture_default_str();
  compare->add_option("--alpha", compare_args.alpha, "significance level")->capture_default_str();
  compare->add_option("--resamples", compare_args.bootstrap_resamples, "bootstrap resamples")->capture_default_str();
  compare->add_option("--seed", compare_args.seed, "bootstrap seed")->capture_default_str();

  auto qualify = add_qualify_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  if (keygen->parsed()) {
    auto keys = generate_keypair();
    if (!keys) return report(keys.error());
    if (auto s = write_keypair(keygen_out, *keys); !s) return report(s.error());
    if (common.json) {
      std::cout << nlohmann::json{{"public_key", keys->public_key}, {"secret_key_file", keygen_out + ".key"},
                                  {"public_key_file", keygen_out + ".pub"}}.dump() << "\n";
    } else {
      std::cout << fmt::format("wrote {0}.key (secret, mode 0600) and {0}.pub\npublic key: {1}\n", keygen_out,
                               keys->public_key);
    }
    return kExitOk;
  }

  if (compare_tensors->parsed()) {
    compare_tensors_args.json = compare_tensors_args.json || common.json;
    return numerics::run_compare_tensors(compare_tensors_args, std::cout, std::cerr);
  }
  if (compare->parsed()) {
    compare_args.json = common.json;
    compare_args.higher_is_better = !lower_is_better;
    return stats::run_compare_samples(compare_args, std::cout, std::cerr);
  }

  if (qualify_command_parsed(*qualify)) {
    std::unique_ptr<Client> connected;
    auto connect = [&]() -> Result<Client*> {
      auto config = load_client_config(common.config_path);
      auto made = config ? Client::connect(*config) : tl::unexpected(config.error());
      if (!made) return tl::unexpected(made.error());
      connected = std::move(*made);
      return connected.get();
    };
    return run_qualify_command(*qualify, connect, common.json, argc, argv);
  }

  auto client_config = load_client_config(common.config_path);
  if (!client_config) return report(client_config.error());
  auto client = Client::connect(*client_config);
  if (!client) return report(client.error());
  Client& c = **client;

  if (whoami->parsed()) {
    auto r = expect_reply<protocol::WhoamiReply>(c.request(protocol::Whoami{}));
    if (!r) return report(r.error());
    if (common.json) std::cout << protocol::to_json(*r).dump(2) << "\n";
    else std::cout << fmt::format("{} (role {}), protocol v{}\n", r->key_name, protocol::enum_name(r->role), r->protocol_version);
    return kExitOk;
  }
  if (nodes->parsed()) {
    auto r = expect_reply<protocol::NodeList>(c.request(protocol::ListNodes{}));
    if (!r) return report(r.error());
    if (common.json) std::cout << protocol::to_json(r->nodes).dump(2) << "\n";
    else print_nodes(*r);
    return kExitOk;
  }
  if (submit->parsed()) {
    auto cls = protocol::enum_from_name<protocol::PriorityClass>(submit_class);
    if (!cls) {
      return report(Error{Errc::invalid_argument, fmt::format("--class {} is not one of release, presubmit, bisect, "
                                                              "nightly, experiment", submit_class)});
    }
    submit_req.priority_class = *cls;
    Body request = submit_req;
    if (!submit_lease.empty()) {
      auto lease_id = parse_lease_id(submit_lease);
      if (!lease_id) return report(lease_id.error());
      request = protocol::SubmitInLease{*lease_id, submit_req};
    }
    auto r = expect_reply<protocol::JobAccepted>(c.request(std::move(request)));
    if (!r) return report(r.error());
    if (!submit_wait) {
      if (common.json) std::cout << nlohmann::json{{"job_id", r->job_id}}.dump() << "\n";
      else std::cout << fmt::format("job {} queued\n", r->job_id);
      return kExitOk;
    }
    result_id = r->job_id;
    result_wait = true;
  }
  if (submit->parsed() || result->parsed()) {
    Result<protocol::JobDetail> detail = result_wait ? wait_for_job(c, result_id, common.json)
                                                     : expect_reply<protocol::JobDetail>(c.request(protocol::GetJob{result_id}));
    if (!detail) return report(detail.error());
    if (common.json) std::cout << protocol::to_json(*detail).dump(2) << "\n";
    else print_job_detail(*detail);
    if (!protocol::is_terminal(detail->job.state)) return kExitOk;
    return detail->job.state == protocol::JobState::succeeded ? kExitOk : kExitFailed;
  }
  if (jobs->parsed()) {
    auto r = expect_reply<protocol::JobList>(c.request(jobs_req));
    if (!r) return report(r.error());
    if (common.json) std::cout << protocol::to_json(r->jobs).dump(2) << "\n";
    else print_jobs(*r);
    return kExitOk;
  }
  if (lease->parsed()) {
    auto cls = protocol::enum_from_name<protocol::PriorityClass>(lease_class);
    if (!cls) {
      return report(Error{Errc::invalid_argument, fmt::format("--class {} is not one of release, presubmit, bisect, "
                                                              "nightly, experiment", lease_class)});
    }
    lease_req.priority_class = *cls;
    if (lease_req.nodes > 0 && lease->count("--chips") == 0) lease_req.chips = 0;
    const double minutes = lease_hours * 60 + lease_minutes;
    if (minutes <= 0) {
      return report(Error{Errc::invalid_argument, "say how long to hold the chips: --hours H and/or --minutes M"});
    }
    lease_req.duration_ms = static_cast<std::uint64_t>(minutes * 60000);
    if (lease_start_in_minutes > 0) {
      const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
      lease_req.start_at_ms = static_cast<std::uint64_t>(now_ms + static_cast<std::int64_t>(lease_start_in_minutes * 60000));
    }
    Result<Body> reply = c.request(lease_req);
    if (!reply) return report(reply.error());
    protocol::LeaseSummary summary;
    if (auto* granted = std::get_if<protocol::LeaseGranted>(&*reply)) {
      summary = granted->lease;
      if (common.json) std::cout << protocol::to_json(*granted).dump() << "\n" << std::flush;
      else print_granted(summary);
      if (lease_detach || lease_no_wait) return kExitOk;
    } else if (auto* pending = std::get_if<protocol::LeasePending>(&*reply)) {
      summary = pending->lease;
      if (common.json) {
        std::cout << protocol::to_json(*pending).dump() << "\n" << std::flush;
      } else {
        std::cout << fmt::format("lease L{} pending: {}\n", summary.lease_id, pending->explanation) << std::flush;
      }
      if (lease_no_wait) return kExitOk;
    } else {
      return report(Error{Errc::bad_message, fmt::format("the coordinator answered request_lease with '{}'",
                                                         protocol::type_name(*reply))});
    }
    LeaseWatchOptions options;
    options.detach = lease_detach && !lease_wait_notice;
    options.json = common.json;
    options.wait_ms = std::clamp<std::uint32_t>(client_config->timeout_ms / 2, 100, 30000);
    return follow_lease(c, summary, options);
  }
  if (leases->parsed()) {
    auto r = expect_reply<protocol::LeaseList>(c.request(protocol::ListLeases{leases_all}));
    if (!r) return report(r.error());
    if (common.json) std::cout << protocol::to_json(r->leases).dump(2) << "\n";
    else print_leases(*r);
    return kExitOk;
  }
  if (queue->parsed()) {
    protocol::QueueWhy why;
    if (!queue_why_id.empty() && (queue_why_id[0] == 'L' || queue_why_id[0] == 'l')) {
      auto id = parse_lease_id(queue_why_id);
      if (!id) return report(id.error());
      why.lease_id = *id;
    } else if (!queue_why_id.empty() && queue_why_id.size() <= 18 &&
               queue_why_id.find_first_not_of("0123456789") == std::string::npos) {
      why.job_id = std::stoull(queue_why_id);
    } else {
      return report(Error{Errc::invalid_argument, fmt::format("'{}' is neither a job id (42) nor a lease id (L3)",
                                                              queue_why_id)});
    }
    auto r = expect_reply<protocol::QueueExplanation>(c.request(why));
    if (!r) return report(r.error());
    if (common.json) {
      std::cout << protocol::to_json(*r).dump(2) << "\n";
      return kExitOk;
    }
    if (!r->pending || r->reasons.empty()) {
      std::cout << r->text << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("{} is pending:\n",
                             why.lease_id ? fmt::format("lease L{}", why.lease_id) : fmt::format("job {}", why.job_id));
    for (const auto& reason : r->reasons) std::cout << "  - " << reason << "\n";
    std::cout << (r->expected_start_ms ? "expected to start at " + when_text(r->expected_start_ms)
                                       : std::string("no expected start: no eligible capacity in sight"))
              << "\n";
    return kExitOk;
  }
  if (diag->parsed()) {
    protocol::SubmitJob request;
    request.workload = std::string(protocol::kDiagWorkload);
    request.node_id = diag_node;
    request.args = {"--level", std::to_string(diag_level)};
    request.priority_class = protocol::PriorityClass::release;
    request.max_attempts = 1;
    // Level 3 runs the long compute stress (about 15 minutes on hardware).
    request.timeout_ms = diag_level >= 3 ? 3600000 : 900000;
    auto accepted = expect_reply<protocol::JobAccepted>(c.request(request));
    if (!accepted) return report(accepted.error());
    if (diag_no_wait) {
      if (common.json) std::cout << nlohmann::json{{"job_id", accepted->job_id}}.dump() << "\n";
      else std::cout << fmt::format("diagnostics queued as job {}; kiln result {} --wait\n", accepted->job_id,
                                    accepted->job_id);
      return kExitOk;
    }
    auto detail = wait_for_job(c, accepted->job_id, common.json);
    if (!detail) return report(detail.error());
    if (common.json) {
      std::cout << (detail->result.empty() ? protocol::to_json(*detail).dump(2) : detail->result) << "\n";
    } else {
      // The agent's readable report is the job's output; the JSON report is its result.
      std::cout << detail->output_tail;
      std::cout << fmt::format("diagnostics on {}: job {} {}\n", diag_node, accepted->job_id,
                               protocol::enum_name(detail->job.state));
    }
    return detail->job.state == protocol::JobState::succeeded ? kExitOk : kExitFailed;
  }
  if (cancel->parsed() || drain->parsed() || undrain->parsed() || release_lease->parsed()) {
    if (release_lease->parsed()) {
      auto id = parse_lease_id(release_lease_id);
      if (!id) return report(id.error());
      auto r = expect_reply<protocol::Ok>(c.request(protocol::ReleaseLease{*id}));
      if (!r) return report(r.error());
      if (common.json) std::cout << protocol::to_json(*r).dump() << "\n";
      else std::cout << r->detail << "\n";
      return kExitOk;
    }
    Body request = cancel->parsed() ? Body(protocol::CancelJob{cancel_id})
                   : drain->parsed() ? Body(drain_req)
                                     : Body(protocol::DrainNode{undrain_node, false, ""});
    auto r = expect_reply<protocol::Ok>(c.request(std::move(request)));
    if (!r) return report(r.error());
    if (common.json) std::cout << protocol::to_json(*r).dump() << "\n";
    else std::cout << r->detail << "\n";
    return kExitOk;
  }
  return kExitUsage;
}

}  // namespace kiln::cli
