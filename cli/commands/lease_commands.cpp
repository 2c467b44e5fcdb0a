// kiln lease, kiln leases, kiln release-lease ID.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/job_view.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/wait_progress.h"
#include "cli/ids.h"
#include "cli/text.h"

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

std::string notice_text(std::uint64_t lease_id, const std::string& message) {
  return fmt::format("PREEMPTION NOTICE for lease L{}: {}", lease_id, message);
}

struct LeaseWatchOptions {
  bool detach = false;  // return once granted
  bool json = false;
  std::uint32_t wait_ms = 5000;
};

// Follows one lease's events and tells people what changed. The lease's state in each event is
// what counts: an event the watcher did not get (the coordinator restarted meanwhile, or it fell
// behind) still shows as the state it left, in the `status` event that answers the next watch.
class LeaseFollower {
 public:
  LeaseFollower(std::uint64_t lease_id, const LeaseWatchOptions& options, protocol::LeaseState shown)
      : lease_id_(lease_id), options_(options), shown_(shown) {}

  // True when the watch is over.
  bool show(const protocol::LeaseEvent& event) {
    const bool changed = event.lease.state != shown_;
    if (options_.json && (event.kind != protocol::LeaseEventKind::status || changed)) {
      std::cout << protocol::to_json(event).dump() << "\n" << std::flush;
    }
    shown_ = event.lease.state;
    switch (event.kind) {
      case protocol::LeaseEventKind::status: return show_status(event, changed);
      case protocol::LeaseEventKind::granted:
        progress_.done();
        if (!options_.json) print_granted(event.lease);
        return options_.detach;
      case protocol::LeaseEventKind::preempt_notice: say(notice_text(lease_id_, event.message)); return false;
      case protocol::LeaseEventKind::requeued: say(fmt::format("lease L{} {}", lease_id_, event.message)); return false;
      case protocol::LeaseEventKind::ended: say(fmt::format("lease L{} ended: {}", lease_id_, event.message)); return true;
    }
    return false;
  }

 private:
  bool show_status(const protocol::LeaseEvent& event, bool changed) {
    switch (event.lease.state) {
      case protocol::LeaseState::pending:
        if (changed) say(fmt::format("lease L{} is queued again: {}", lease_id_, event.lease.detail));
        if (!options_.json) {
          const TimeMs now_ms = wall_now_ms();
          progress_.show(fmt::format("lease L{} waiting: {}", lease_id_, event.message), now_ms - started_ms_, now_ms);
        }
        return false;
      case protocol::LeaseState::granted:
        if (!changed) return false;
        progress_.done();
        if (!options_.json) print_granted(event.lease);
        return options_.detach;
      case protocol::LeaseState::preempting:
        if (changed) say(notice_text(lease_id_, event.lease.detail));
        return false;
      case protocol::LeaseState::ended: say(fmt::format("lease L{} ended: {}", lease_id_, event.lease.detail)); return true;
    }
    return false;
  }

  void say(const std::string& line) {
    progress_.done();
    if (!options_.json) std::cout << line << "\n" << std::flush;
  }

  std::uint64_t lease_id_;
  LeaseWatchOptions options_;
  protocol::LeaseState shown_;
  ProgressLine progress_ = ProgressLine::for_stderr();
  TimeMs started_ms_ = wall_now_ms();
};

// Follows a lease until it ends (or, detached, until it is granted), from the event `seq` on,
// printing what happens: progress while pending, the grant, preemption notices. The client asks
// again across a coordinator restart (Reconnect), and the lease's events keep their numbers.
int follow_lease(Client& client, std::uint64_t lease_id, std::uint64_t seq, protocol::LeaseState shown,
                 const LeaseWatchOptions& options) {
  LeaseFollower follower(lease_id, options, shown);
  while (true) {
    auto event = expect_reply<protocol::LeaseEvent>(client.request(protocol::WatchLease{lease_id, seq, options.wait_ms}));
    if (!event) return report(event.error());
    seq = std::max(seq, event->seq);
    event->lease.lease_id = lease_id;
    if (follower.show(*event)) return kExitOk;
  }
}

LeaseWatchOptions watch_options(CommandContext& context) {
  LeaseWatchOptions options;
  options.json = context.json();
  // Parked watches are answered within half the reply timeout, so silence means a lost coordinator.
  options.wait_ms = std::clamp<std::uint32_t>(context.client_config().timeout_ms / 2, 100, 30000);
  return options;
}

// Follows an existing lease from another terminal: what it is now, then what happens to it.
int attach_to_lease(Client& client, std::uint64_t lease_id, CommandContext& context) {
  constexpr std::uint64_t kAfterEveryEvent = INT64_MAX;
  auto now = expect_reply<protocol::LeaseEvent>(client.request(protocol::WatchLease{lease_id, kAfterEveryEvent, 0}));
  if (!now) return report(now.error());
  const protocol::LeaseSummary& lease = now->lease;
  if (context.json()) {
    std::cout << protocol::to_json(*now).dump() << "\n" << std::flush;
  } else {
    switch (lease.state) {
      case protocol::LeaseState::pending:
        std::cout << fmt::format("lease L{} pending: {}\n", lease_id, now->message) << std::flush;
        break;
      case protocol::LeaseState::granted: print_granted(lease); break;
      case protocol::LeaseState::preempting:
        print_granted(lease);
        std::cout << notice_text(lease_id, lease.detail) << "\n" << std::flush;
        break;
      case protocol::LeaseState::ended:
        std::cout << fmt::format("lease L{} ended: {}\n", lease_id, lease.detail);
        break;
    }
  }
  if (lease.state == protocol::LeaseState::ended) return kExitOk;
  return follow_lease(client, lease_id, now->seq, lease.state, watch_options(context));
}

// A command on one lease, given positionally (`L3`): watch, release-lease.
class LeaseIdCommand : public RemoteCommand {
 public:
  void add_options(CLI::App& command) override {
    command.add_option("LEASE", id_text_, "lease id, e.g. L3")->required();
  }
  Status check_arguments() override {
    auto id = parse_lease_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    lease_id_ = *id;
    return {};
  }

 protected:
  std::string id_text_;
  std::uint64_t lease_id_ = 0;
};

// kiln lease watch L7: the same as kiln lease --attach L7.
class LeaseWatchCommand : public LeaseIdCommand {
 public:
  std::string name() const override { return "watch"; }
  std::string help() const override {
    return "follow an existing lease (yours, or any as ops/admin): its grant, preemption notices, its end";
  }
  int run_with(Client& client, CommandContext& context) override { return attach_to_lease(client, lease_id_, context); }
};

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
    command.add_option("--attach", attach_, "follow an existing lease instead of asking for one (as `kiln lease watch`)");
  }
  const CommandList& subcommands() const override { return subcommands_; }
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
  std::string attach_;
  std::uint64_t attach_lease_id_ = 0;
  CommandList subcommands_ = [] {
    CommandList watch;
    watch.push_back(std::make_unique<LeaseWatchCommand>());
    return watch;
  }();
};

Status LeaseCommand::check_arguments() {
  if (!attach_.empty()) {
    auto id = parse_lease_id(attach_);
    if (!id) return tl::unexpected(id.error());
    attach_lease_id_ = *id;
    return {};
  }
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
  if (attach_lease_id_ != 0) return attach_to_lease(client, attach_lease_id_, context);
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
  LeaseWatchOptions options = watch_options(context);
  options.detach = detach_ && !wait_notice_;
  // What the reply already showed: the watch goes on from its event.
  return follow_lease(client, summary.lease_id, summary.event_seq, summary.state, options);
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

class ReleaseLeaseCommand : public LeaseIdCommand {
 public:
  std::string name() const override { return "release-lease"; }
  std::string help() const override { return "release a lease (yours, or any as ops/admin)"; }
  int run_with(Client& client, CommandContext& context) override {
    return request_ok(client, protocol::ReleaseLease{lease_id_}, context.json());
  }
};

}  // namespace

void add_lease_commands(CommandList& commands) {
  commands.push_back(std::make_unique<LeaseCommand>());
  commands.push_back(std::make_unique<LeasesCommand>());
  commands.push_back(std::make_unique<ReleaseLeaseCommand>());
}

}  // namespace kiln::cli
