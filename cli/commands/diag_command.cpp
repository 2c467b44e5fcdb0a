// kiln diag NODE [--level N]: diagnostics through the coordinator, which drains the node first.
// kiln recheck NODE: the other way out of a wrong-results quarantine, a correct rerun of the job
// whose outputs were wrong there (docs/health.md, "What releases a node").
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/health/diag_report.h"
#include "common/protocol/json.h"
#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/job_view.h"
#include "cli/exit_codes.h"

namespace kiln::cli {

namespace {

class DiagCommand : public RemoteCommand {
 public:
  std::string name() const override { return "diag"; }
  std::string help() const override {
    return "run diagnostics on a node through the coordinator, which drains it first (lab, ops, admin); exit 0 "
           "pass or warn, 1 fail";
  }
  void add_options(CLI::App& command) override {
    command.add_option("NODE", node_, "node id");
    add_deprecated_option(command, "--node", "kiln diag NODE", [this](const std::string& v) { node_ = v; });
    command.add_option("--level", level_, "1: seconds; 2: adds memory and interconnect; 3: adds compute stress")
        ->check(CLI::Range(1, 3))
        ->capture_default_str();
    command.add_flag("--no-wait", no_wait_, "print the job id and return at once");
  }
  Status check_arguments() override {
    if (!node_.empty()) return {};
    return fail(Errc::invalid_argument, "say which node to diagnose: kiln diag NODE (kiln nodes lists them)");
  }
  int run_with(Client& client, CommandContext& context) override {
    protocol::SubmitJob request;
    request.workload = std::string(protocol::kDiagWorkload);
    request.node_id = node_;
    request.args = {"--level", std::to_string(level_)};
    request.priority_class = protocol::PriorityClass::release;
    request.max_attempts = 1;
    // Level 3 runs the long compute stress (about 15 minutes on hardware).
    request.timeout_ms = level_ >= 3 ? 3600000 : 900000;
    auto accepted = expect_reply<protocol::JobAccepted>(client.request(request));
    if (!accepted) return report(accepted.error());
    if (no_wait_) {
      if (context.json()) std::cout << nlohmann::json{{"job_id", accepted->job_id}}.dump() << "\n";
      else std::cout << fmt::format("diagnostics queued as job {}; kiln result {} --wait\n", accepted->job_id,
                                    accepted->job_id);
      return kExitOk;
    }
    // Progress goes to stderr, so stdout holds nothing but the report.
    auto detail = wait_for_job(client, accepted->job_id, false);
    if (!detail) return report(detail.error());
    // The job's result is the agent's JSON report; shown here as the agent shows it locally.
    auto diag = health::parse_diag_json(detail->result);
    if (!diag) {
      std::cerr << fmt::format("kiln: diagnostics on {} (job {}) {} without a report: {}\n", node_, accepted->job_id,
                               protocol::enum_name(detail->job.state), detail->job.detail);
      if (context.json()) std::cout << protocol::to_json(*detail).dump(2) << "\n";
      else std::cout << detail->output_tail;
      return kExitFailed;
    }
    if (context.json()) std::cout << health::format_diag_json(*diag);
    else std::cout << health::format_diag_text(*diag);
    // A pass too weak for the node's quarantine does not release it; the coordinator says so.
    if (const auto refused = detail->job.detail.find("stays quarantined"); refused != std::string::npos) {
      const auto from = detail->job.detail.rfind("node ", refused);
      std::cerr << "kiln: " << detail->job.detail.substr(from == std::string::npos ? refused : from) << "\n";
    }
    return diag->verdict == health::CheckStatus::pass || diag->verdict == health::CheckStatus::warn ? kExitOk
                                                                                                   : kExitFailed;
  }

 private:
  std::string node_;
  int level_ = 1;
  bool no_wait_ = false;
};

class RecheckCommand : public RemoteCommand {
 public:
  std::string name() const override { return "recheck"; }
  std::string help() const override {
    return "rerun, on a node quarantined for wrong outputs, the job whose outputs were wrong, on its chips: correct "
           "outputs release the node (ci, lab, ops, admin); exit 0 released, 1 still quarantined";
  }
  void add_options(CLI::App& command) override {
    command.add_option("NODE", node_, "node id");
    command.add_flag("--no-wait", no_wait_, "print the rerun's job id and return at once");
  }
  Status check_arguments() override {
    if (!node_.empty()) return {};
    return fail(Errc::invalid_argument, "say which node to recheck: kiln recheck NODE (kiln nodes lists them)");
  }
  int run_with(Client& client, CommandContext& context) override {
    auto accepted = expect_reply<protocol::JobAccepted>(client.request(protocol::RecheckNode{node_}));
    if (!accepted) return report(accepted.error());
    if (no_wait_) {
      if (context.json()) std::cout << nlohmann::json{{"job_id", accepted->job_id}}.dump() << "\n";
      else std::cout << fmt::format("rerun queued as job {}; kiln result {} --wait\n", accepted->job_id,
                                    accepted->job_id);
      return kExitOk;
    }
    auto detail = wait_for_job(client, accepted->job_id, context.json());
    if (!detail) return report(detail.error());
    // The node's state after the rerun is the answer; the job's detail says why.
    auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
    if (!nodes) return report(nodes.error());
    std::string state = "unknown";
    for (const auto& node : nodes->nodes) {
      if (node.node_id == node_) state = protocol::enum_name(node.state);
    }
    const bool released = state != "quarantined" && state != "unknown";
    if (context.json()) {
      std::cout << nlohmann::json{{"job_id", accepted->job_id},
                                  {"job_state", protocol::enum_name(detail->job.state)},
                                  {"node_id", node_},
                                  {"node_state", state},
                                  {"released", released},
                                  {"detail", detail->job.detail}}
                       .dump(2)
                << "\n";
    } else {
      std::cout << fmt::format("job {} {}: {}\nnode {} is {}\n", accepted->job_id,
                               protocol::enum_name(detail->job.state), detail->job.detail, node_, state);
    }
    return released ? kExitOk : kExitFailed;
  }

 private:
  std::string node_;
  bool no_wait_ = false;
};

}  // namespace

void add_diag_command(CommandList& commands) {
  commands.push_back(std::make_unique<DiagCommand>());
  commands.push_back(std::make_unique<RecheckCommand>());
}

}  // namespace kiln::cli
