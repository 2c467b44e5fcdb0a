// kiln nodes, kiln drain NODE, kiln undrain NODE.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/commands/all.h"
#include "cli/commands/job_view.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"

namespace kiln::cli {

namespace {

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
                             duration_text(n.last_seen_ms_ago) + " ago", n.agent_version, n.driver_version);
  }
}

class NodesCommand : public RemoteCommand {
 public:
  std::string name() const override { return "nodes"; }
  std::string help() const override { return "list nodes: state, hardware revision, chips free and used"; }
  void add_options(CLI::App&) override {}
  int run_with(Client& client, CommandContext& context) override {
    auto r = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
    if (!r) return report(r.error());
    if (context.json()) std::cout << protocol::to_json(r->nodes).dump(2) << "\n";
    else print_nodes(*r);
    return kExitOk;
  }
};

// drain and undrain: one request, the node positional, the coordinator's answer printed.
class DrainCommand : public RemoteCommand {
 public:
  explicit DrainCommand(bool drain) : drain_(drain) {}
  std::string name() const override { return drain_ ? "drain" : "undrain"; }
  std::string help() const override {
    return drain_ ? "stop dispatching new work to a node (ops, lab, admin)"
                  : "resume dispatching to a drained node (ops, lab, admin)";
  }
  void add_options(CLI::App& command) override {
    command.add_option("NODE", request_.node_id, "node id")->required();
    if (drain_) command.add_option("--reason", request_.reason, "why, for the people who look later");
  }
  int run_with(Client& client, CommandContext& context) override {
    request_.drain = drain_;
    return request_ok(client, request_, context.json());
  }

 private:
  bool drain_;
  protocol::DrainNode request_;
};

}  // namespace

void add_node_commands(CommandList& commands) {
  commands.push_back(std::make_unique<NodesCommand>());
  commands.push_back(std::make_unique<DrainCommand>(true));
  commands.push_back(std::make_unique<DrainCommand>(false));
}

}  // namespace kiln::cli
