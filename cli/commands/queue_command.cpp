// kiln queue: the queue in priority order; kiln queue ID: why a job or lease is pending and when it
// should start.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/ids.h"
#include "cli/text.h"

namespace kiln::cli {

namespace {

std::string asks_text(const protocol::QueueEntry& e) {
  std::string what = e.nodes > 0 ? fmt::format("{} nodes", e.nodes) : fmt::format("{} chips", e.chips);
  if (!e.workload.empty()) what = e.workload + ", " + what;
  if (!e.node_id.empty()) return what + " on " + e.node_id;
  return what + (e.hardware_revision.empty() ? "" : " rev " + e.hardware_revision);
}

std::string age_text(std::uint64_t since_ms) {
  if (since_ms == 0) return "-";
  const std::int64_t age_ms = wall_now_ms() - static_cast<std::int64_t>(since_ms);
  return duration_text(static_cast<std::uint64_t>(std::max<std::int64_t>(0, age_ms)));
}

void print_queue(const protocol::QueueList& list) {
  if (list.entries.empty()) {
    std::cout << "the queue is empty: nothing waits\n";
    return;
  }
  const auto row = [](const auto&... columns) {
    std::cout << fmt::format("{:>3}  {:<8} {:<10} {:<12} {:<26} {:>9}  {}\n", columns...);
  };
  row("#", "WAITING", "CLASS", "OWNER", "ASKS", "WAITED", "EXPECTED START");
  std::size_t position = 0;
  for (const auto& e : list.entries) {
    row(++position, e.lease_id ? fmt::format("L{}", e.lease_id) : fmt::format("job {}", e.job_id),
        protocol::enum_name(e.priority_class), e.owner, asks_text(e), age_text(e.queued_at_ms),
        e.expected_start_ms ? when_text(e.expected_start_ms) : "not in sight");
    for (const auto& reason : e.reasons) std::cout << "       - " << reason << "\n";
  }
  if (list.more) std::cout << fmt::format("(the first {}; --limit shows more)\n", list.entries.size());
}

class QueueCommand : public RemoteCommand {
 public:
  std::string name() const override { return "queue"; }
  std::string help() const override {
    return "the queue in priority order, each with why it waits and when it should start; with an id, why that job "
           "or lease is pending";
  }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_text_, "a job id (42) or a lease id (L3); without it, the whole queue");
    add_deprecated_option(command, "--why", "kiln queue ID", [this](const std::string& v) { id_text_ = v; });
    command.add_option("--limit", list_.limit, "how many entries of the queue, 1 to 1000")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
  }
  Status check_arguments() override {
    if (id_text_.empty()) return {};
    auto id = parse_job_or_lease_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    request_.job_id = id->job_id;
    request_.lease_id = id->lease_id;
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    if (id_text_.empty()) return list_queue(client, context);
    auto r = expect_reply<protocol::QueueExplanation>(client.request(request_));
    if (!r) return report(r.error());
    if (context.json()) {
      std::cout << protocol::to_json(*r).dump(2) << "\n";
      return kExitOk;
    }
    if (!r->pending || r->reasons.empty()) {
      std::cout << r->text << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("{} is pending:\n", request_.lease_id ? fmt::format("lease L{}", request_.lease_id)
                                                                   : fmt::format("job {}", request_.job_id));
    for (const auto& reason : r->reasons) std::cout << "  - " << reason << "\n";
    std::cout << (r->expected_start_ms ? "expected to start at " + when_text(r->expected_start_ms)
                                       : std::string("no expected start: no eligible capacity in sight"))
              << "\n";
    return kExitOk;
  }

 private:
  int list_queue(Client& client, CommandContext& context) {
    auto r = expect_reply<protocol::QueueList>(client.request(list_));
    if (!r) return report(r.error());
    if (context.json()) std::cout << protocol::to_json(*r).dump(2) << "\n";
    else print_queue(*r);
    return kExitOk;
  }

  std::string id_text_;
  protocol::QueueWhy request_;
  protocol::ListQueue list_;
};

}  // namespace

void add_queue_command(CommandList& commands) { commands.push_back(std::make_unique<QueueCommand>()); }

}  // namespace kiln::cli
