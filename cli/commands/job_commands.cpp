// kiln submit, kiln jobs, kiln result ID, kiln cancel ID.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/protocol/json.h"
#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/job_view.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/ids.h"

namespace kiln::cli {

namespace {

void add_benchmark_options(CLI::App& command, protocol::BenchmarkSpec& bench) {
  // A benchmark: warmup until steady, then timed repeats (docs/workloads.md).
  command.add_option("--repeats", bench.repeats, "run as a benchmark with this many timed repeats")->group("Benchmark");
  command.add_option("--warmup-min", bench.warmup_min, "warmup iterations always run")
      ->capture_default_str()
      ->group("Benchmark");
  command.add_option("--warmup-max", bench.warmup_max, "give up waiting for steady after this many")
      ->capture_default_str()
      ->group("Benchmark");
  command.add_option("--steady-window", bench.steady_window, "steady: this many last throughputs agree")
      ->capture_default_str()
      ->group("Benchmark");
  command.add_option("--steady-tolerance-ppm", bench.steady_tolerance_ppm,
                     "steady: their relative spread, in millionths")
      ->capture_default_str()
      ->group("Benchmark");
}

class SubmitCommand : public RemoteCommand {
 public:
  std::string name() const override { return "submit"; }
  std::string help() const override { return "submit a job: a workload the agents know, on N chips"; }
  void add_options(CLI::App& command) override {
    command.add_option("--workload", request_.workload, "workload name (from the agents' [workloads])")->required();
    command.add_option("--chips", request_.chips, "chips on one node")->capture_default_str();
    command.add_option("--rev", request_.hardware_revision, "hardware revision (default: any)");
    command.add_option("--node", request_.node_id, "placement constraint: run on this node only");
    command.add_option("--class", class_, "release, presubmit, bisect, nightly or experiment")->capture_default_str();
    command.add_option("--timeout", timeout_, "hard deadline of one attempt (90s, 30m, 2h)")->capture_default_str();
    add_deprecated_option(command, "--timeout-ms", "--timeout DURATION", [this](const std::string& v) {
      timeout_ = v + "ms";
    });
    command.add_option("--max-attempts", request_.max_attempts, "attempts when a node is lost mid-run")
        ->capture_default_str();
    command.add_option("--seed", request_.seed, "seed passed to the workload")->capture_default_str();
    add_benchmark_options(command, request_.benchmark);
    command.add_flag("--wait", wait_, "wait for the job to end; the exit code says whether it succeeded");
    command.add_option("--lease", lease_, "run inside this lease of yours (L3), on its chips");
    command.add_option("--ranks", ranks_, "with --lease of whole nodes: run N copies as one gang, one per node")
        ->check(CLI::Range(1, 64));
    command.add_option("args", request_.args, "arguments for the workload (after --)");
  }
  Status check_arguments() override {
    auto cls = parse_priority_class(class_);
    if (!cls) return tl::unexpected(cls.error());
    request_.priority_class = *cls;
    auto timeout_ms = parse_duration_ms(timeout_, "--timeout");
    if (!timeout_ms) return tl::unexpected(timeout_ms.error());
    if (*timeout_ms > UINT32_MAX) return fail(Errc::invalid_argument, "--timeout: at most 49 days");
    request_.timeout_ms = static_cast<std::uint32_t>(*timeout_ms);
    if (ranks_ > 0 && lease_.empty()) {
      return fail(Errc::invalid_argument, "--ranks runs a gang inside a lease of whole nodes: add --lease L (from "
                                          "`kiln lease --nodes N`)");
    }
    if (lease_.empty()) return {};
    auto lease_id = parse_lease_id(lease_);
    if (!lease_id) return tl::unexpected(lease_id.error());
    lease_id_ = *lease_id;
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    if (ranks_ > 0) return run_gang(client, context);
    protocol::Body request = request_;
    if (lease_id_ != 0) request = protocol::SubmitInLease{lease_id_, request_};
    auto r = expect_reply<protocol::JobAccepted>(client.request(std::move(request)));
    if (!r) return report(r.error());
    if (wait_) return show_job(client, r->job_id, true, context.json());
    if (context.json()) std::cout << nlohmann::json{{"job_id", r->job_id}}.dump() << "\n";
    else std::cout << fmt::format("job {} queued\n", r->job_id);
    return kExitOk;
  }

 private:
  int run_gang(Client& client, CommandContext& context) {
    protocol::SubmitGang gang{lease_id_, std::vector<protocol::SubmitJob>(ranks_, request_)};
    auto r = expect_reply<protocol::GangAccepted>(client.request(std::move(gang)));
    if (!r) return report(r.error());
    if (wait_) {
      int worst = kExitOk;
      for (std::uint64_t id : r->job_ids) {
        const int code = show_job(client, id, true, context.json());
        if (worst == kExitOk) worst = code;
      }
      return worst;
    }
    if (context.json()) std::cout << nlohmann::json{{"job_ids", r->job_ids}}.dump() << "\n";
    else std::cout << fmt::format("gang {}: jobs {} to {} queued\n", r->job_ids.front(), r->job_ids.front(), r->job_ids.back());
    return kExitOk;
  }

  protocol::SubmitJob request_;
  std::string class_ = "experiment";
  std::string timeout_ = "10m";
  std::string lease_;
  std::uint64_t lease_id_ = 0;
  std::uint32_t ranks_ = 0;  // 0: one job, no gang
  bool wait_ = false;
};

void print_jobs(const protocol::JobList& list) {
  if (list.jobs.empty()) {
    std::cout << "no jobs\n";
    return;
  }
  const auto row = [](const auto&... columns) {
    std::cout << fmt::format("{:>6} {:<10} {:<11} {:<14} {:>5} {:<10} {:>9}  {}\n", columns...);
  };
  row("JOB", "STATE", "CLASS", "WORKLOAD", "CHIPS", "NODE", "TOOK", "DETAIL");
  for (const auto& j : list.jobs) {
    row(j.job_id, protocol::enum_name(j.state), protocol::enum_name(j.priority_class), j.workload, j.chips,
        j.node_id.empty() ? "-" : j.node_id, j.duration_ms ? duration_text(j.duration_ms) : "-", j.detail);
  }
}

class JobsCommand : public RemoteCommand {
 public:
  std::string name() const override { return "jobs"; }
  std::string help() const override { return "list recent jobs"; }
  void add_options(CLI::App& command) override {
    command.add_option("--limit", request_.limit, "how many")->capture_default_str();
    command.add_flag("--active", request_.active_only, "only queued and running jobs");
  }
  int run_with(Client& client, CommandContext& context) override {
    auto r = expect_reply<protocol::JobList>(client.request(request_));
    if (!r) return report(r.error());
    if (context.json()) std::cout << protocol::to_json(r->jobs).dump(2) << "\n";
    else print_jobs(*r);
    return kExitOk;
  }

 private:
  protocol::ListJobs request_;
};

// result and cancel: the job id positional.
class JobIdCommand : public RemoteCommand {
 public:
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_text_, "job id (42 or J42)")->required();
    add_more_options(command);
  }
  Status check_arguments() override {
    auto id = parse_job_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    job_id_ = *id;
    return {};
  }

 protected:
  virtual void add_more_options(CLI::App&) {}
  std::string id_text_;
  std::uint64_t job_id_ = 0;
};

class ResultCommand : public JobIdCommand {
 public:
  std::string name() const override { return "result"; }
  std::string help() const override { return "show one job: state, placement, result and output"; }
  void add_more_options(CLI::App& command) override {
    command.add_flag("--wait", wait_, "wait until the job ends");
  }
  int run_with(Client& client, CommandContext& context) override {
    return show_job(client, job_id_, wait_, context.json());
  }

 private:
  bool wait_ = false;
};

class CancelCommand : public JobIdCommand {
 public:
  std::string name() const override { return "cancel"; }
  std::string help() const override { return "cancel a job (yours, or any as ops/admin)"; }
  int run_with(Client& client, CommandContext& context) override {
    return request_ok(client, protocol::CancelJob{job_id_}, context.json());
  }
};

}  // namespace

void add_job_commands(CommandList& commands) {
  commands.push_back(std::make_unique<SubmitCommand>());
  commands.push_back(std::make_unique<JobsCommand>());
  commands.push_back(std::make_unique<ResultCommand>());
  commands.push_back(std::make_unique<CancelCommand>());
}

}  // namespace kiln::cli
