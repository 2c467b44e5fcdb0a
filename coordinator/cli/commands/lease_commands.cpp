// kiln lease, kiln leases, kiln release-lease ID.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "coordinator/cli/cli_options.h"
#include "coordinator/cli/commands/all.h"
#include "coordinator/cli/commands/job_view.h"
#include "coordinator/cli/duration.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/cli/ids.h"
#include "coordinator/cli/text.h"

namespace kiln::cli {

namespace {

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

// Prints one event for people; true when the watch is over.
bool show_lease_event(const protocol::LeaseEvent& event, const LeaseWatchOptions& options, std::string& last_status) {
  const std::uint64_t id = event.lease.lease_id;
  const auto say = [&](const std::string& line) {
    if (!options.json) std::cout << line << "\n" << std::flush;
  };
  switch (event.kind) {
    case protocol::LeaseEventKind::status:
      if (event.lease.state == protocol::LeaseState::pending && event.message != last_status) {
        std::cerr << fmt::format("lease L{} waiting: {}\n", id, event.message);
        last_status = event.message;
      }
      if (event.lease.state != protocol::LeaseState::ended) return false;
      say(fmt::format("lease L{} ended: {}", id, event.lease.detail));
      return true;
    case protocol::LeaseEventKind::granted:
      last_status.clear();
      if (!options.json) print_granted(event.lease);
      return options.detach;
    case protocol::LeaseEventKind::preempt_notice:
      say(fmt::format("PREEMPTION NOTICE for lease L{}: {}", id, event.message));
      return false;
    case protocol::LeaseEventKind::requeued: say(fmt::format("lease L{} {}", id, event.message)); return false;
    case protocol::LeaseEventKind::ended: say(fmt::format("lease L{} ended: {}", id, event.message)); return true;
  }
  return false;
}

// Follows a lease until it ends (or, detached, until it is granted), printing what happens:
// progress while pending, the grant, preemption notices.
int follow_lease(Client& client, const protocol::LeaseSummary& start, const LeaseWatchOptions& options) {
  std::uint64_t seq = start.event_seq;  // what the request's reply already showed
  std::string last_status;
  while (true) {
    auto event =
        expect_reply<protocol::LeaseEvent>(client.request(protocol::WatchLease{start.lease_id, seq, options.wait_ms}));
    if (!event) return report(event.error());
    seq = std::max(seq, event->seq);
    if (options.json && event->kind != protocol::LeaseEventKind::status) {
      std::cout << protocol::to_json(*event).dump() << "\n" << std::flush;
    }
    event->lease.lease_id = start.lease_id;
    if (show_lease_event(*event, options, last_status)) return kExitOk;
  }
}

class LeaseCommand : public RemoteCommand {
 public:
  std::string name() const override { return "lease"; }
  std::string help() const override {
    return "lease chips for an experiment: waits, prints what it got, then watches for preemption notices until the "
           "lease ends";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--chips", request_.chips, "chips on one node: 1, 2, 4 or 8")->capture_default_str();
    nodes_option_ = command.add_option("--nodes", request_.nodes, "whole nodes instead of chips, all or nothing");
    chips_option_ = command.get_option("--chips");
    command.add_option("--rev", request_.hardware_revision, "hardware revision (default: any)");
    command.add_option("--duration", duration_, "how long to hold the chips (30m, 2h, 1h30m)");
    add_deprecated_option(command, "--hours", "--duration 2h", [this](const std::string& v) { duration_ += v + "h"; });
    add_deprecated_option(command, "--minutes", "--duration 30m",
                          [this](const std::string& v) { duration_ += v + "m"; });
    command.add_option("--start-in", start_in_,
                       "book a window ahead (a release qualification), e.g. 2h: the nodes are held for it from now on");
    add_deprecated_option(command, "--start-in-minutes", "--start-in 30m",
                          [this](const std::string& v) { start_in_ = v + "m"; });
    command.add_option("--class", class_, "priority class (developers lease as experiment)")->capture_default_str();
    command.add_flag("--detach", detach_, "exit once granted instead of watching for notices");
    command.add_flag("--no-wait", no_wait_, "exit at once with the lease id, granted or pending");
    command.add_flag("--wait-notice", wait_notice_, "keep watching after the grant for a preemption notice (default)");
  }
  Status check_arguments() override;
  int run_with(Client& client, CommandContext& context) override;

 private:
  protocol::RequestLease request_;
  CLI::Option* nodes_option_ = nullptr;
  CLI::Option* chips_option_ = nullptr;
  std::string duration_;
  std::string start_in_;
  std::string class_ = "experiment";
  bool detach_ = false;
  bool no_wait_ = false;
  bool wait_notice_ = false;
};

Status LeaseCommand::check_arguments() {
  auto cls = parse_priority_class(class_);
  if (!cls) return tl::unexpected(cls.error());
  request_.priority_class = *cls;
  if (request_.nodes > 0 && chips_option_->count() == 0) request_.chips = 0;
  if (duration_.empty()) return fail(Errc::invalid_argument, "say how long to hold the chips: --duration 2h");
  auto duration_ms = parse_duration_ms(duration_, "--duration");
  if (!duration_ms) return tl::unexpected(duration_ms.error());
  request_.duration_ms = *duration_ms;
  if (start_in_.empty()) return {};
  auto start_in_ms = parse_duration_ms(start_in_, "--start-in");
  if (!start_in_ms) return tl::unexpected(start_in_ms.error());
  request_.start_at_ms = static_cast<std::uint64_t>(wall_now_ms()) + *start_in_ms;
  return {};
}

int LeaseCommand::run_with(Client& client, CommandContext& context) {
  Result<protocol::Body> reply = client.request(request_);
  if (!reply) return report(reply.error());
  protocol::LeaseSummary summary;
  if (auto* granted = std::get_if<protocol::LeaseGranted>(&*reply)) {
    summary = granted->lease;
    if (context.json()) std::cout << protocol::to_json(*granted).dump() << "\n" << std::flush;
    else print_granted(summary);
    if (detach_ || no_wait_) return kExitOk;
  } else if (auto* pending = std::get_if<protocol::LeasePending>(&*reply)) {
    summary = pending->lease;
    if (context.json()) std::cout << protocol::to_json(*pending).dump() << "\n" << std::flush;
    else std::cout << fmt::format("lease L{} pending: {}\n", summary.lease_id, pending->explanation) << std::flush;
    if (no_wait_) return kExitOk;
  } else {
    return report(Error{Errc::bad_message, fmt::format("the coordinator answered request_lease with '{}'",
                                                       protocol::type_name(*reply))});
  }
  LeaseWatchOptions options;
  options.detach = detach_ && !wait_notice_;
  options.json = context.json();
  options.wait_ms = std::clamp<std::uint32_t>(context.client_config().timeout_ms / 2, 100, 30000);
  return follow_lease(client, summary, options);
}

void print_leases(const protocol::LeaseList& list) {
  if (list.leases.empty()) {
    std::cout << "no leases\n";
    return;
  }
  const auto row = [](const auto&... columns) {
    std::cout << fmt::format("{:<6} {:<10} {:<10} {:<12} {:<14} {:<24} {:<22} {}\n", columns...);
  };
  row("LEASE", "STATE", "CLASS", "OWNER", "ASKED", "PLACEMENT", "EXPIRES", "JOBS");
  for (const auto& l : list.leases) {
    row(fmt::format("L{}", l.lease_id), protocol::enum_name(l.state), protocol::enum_name(l.priority_class), l.owner,
        ask_text(l), placement_text(l), l.state == protocol::LeaseState::granted ? when_text(l.expires_at_ms) : "-",
        l.job_ids.empty() ? "-" : fmt::format("{}", fmt::join(l.job_ids, ",")));
    if (l.state != protocol::LeaseState::granted && !l.detail.empty()) std::cout << "       " << l.detail << "\n";
  }
}

class LeasesCommand : public RemoteCommand {
 public:
  std::string name() const override { return "leases"; }
  std::string help() const override { return "list the pending and granted leases"; }
  void add_options(CLI::App& command) override { command.add_flag("--all", all_, "also recently ended leases"); }
  int run_with(Client& client, CommandContext& context) override {
    auto r = expect_reply<protocol::LeaseList>(client.request(protocol::ListLeases{all_}));
    if (!r) return report(r.error());
    if (context.json()) std::cout << protocol::to_json(r->leases).dump(2) << "\n";
    else print_leases(*r);
    return kExitOk;
  }

 private:
  bool all_ = false;
};

class ReleaseLeaseCommand : public RemoteCommand {
 public:
  std::string name() const override { return "release-lease"; }
  std::string help() const override { return "release a lease (yours, or any as ops/admin)"; }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_text_, "lease id, e.g. L3")->required();
  }
  Status check_arguments() override {
    auto id = parse_lease_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    lease_id_ = *id;
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    return request_ok(client, protocol::ReleaseLease{lease_id_}, context.json());
  }

 private:
  std::string id_text_;
  std::uint64_t lease_id_ = 0;
};

}  // namespace

void add_lease_commands(CommandList& commands) {
  commands.push_back(std::make_unique<LeaseCommand>());
  commands.push_back(std::make_unique<LeasesCommand>());
  commands.push_back(std::make_unique<ReleaseLeaseCommand>());
}

}  // namespace kiln::cli
