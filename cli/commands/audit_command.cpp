// kiln audit: the coordinator's append-only audit log, who did what to what and when, over a
// window (docs/operations.md, "Audit").
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "cli/commands/all.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/text.h"

namespace kiln::cli {
namespace {

class AuditCommand : public RemoteCommand {
 public:
  std::string name() const override { return "audit"; }
  std::string help() const override {
    return "the audit log: every lease, preemption, quarantine, drain, install and release step, with who (key and "
           "role), what and when";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--since", since_, "how far back, as 30m, 2h or 7d")->capture_default_str();
    command.add_option("--limit", limit_, "at most this many lines, the oldest first")
        ->capture_default_str()
        ->check(CLI::Range(1, 1000000));
  }
  Status check_arguments() override {
    auto since = parse_duration_ms(since_, "--since");
    if (!since) return tl::unexpected(since.error());
    since_ms_ = *since;
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    protocol::ListAudit query;
    query.since_ms = std::max<std::int64_t>(0, wall_now_ms() - static_cast<std::int64_t>(since_ms_));
    std::vector<protocol::AuditEntry> lines;
    // The coordinator answers in pages that fit a message; ask until it has no more.
    while (lines.size() < limit_) {
      query.limit = static_cast<std::uint32_t>(std::min<std::size_t>(1000, limit_ - lines.size()));
      auto page = expect_reply<protocol::AuditList>(client.request(query));
      if (!page) return report(page.error());
      for (auto& line : page->entries) lines.push_back(std::move(line));
      if (!page->more || page->entries.empty()) break;
      query.after_seq = lines.back().seq;
    }
    if (context.json()) {
      auto doc = nlohmann::json::array();
      for (const auto& line : lines) doc.push_back(protocol::to_json(line));
      std::cout << doc.dump(2) << "\n";
      return kExitOk;
    }
    if (lines.empty()) {
      std::cout << fmt::format("nothing in the audit log in the last {}\n", duration_text(since_ms_));
      return kExitOk;
    }
    std::cout << fmt::format("{:<21} {:<16} {:<11} {:<24} {:<24} {}\n", "TIME", "WHO", "ROLE", "ACTION", "SUBJECT",
                             "DETAIL");
    for (const auto& line : lines) {
      std::cout << fmt::format("{:<21} {:<16} {:<11} {:<24} {:<24} {}\n", utc_time_text(line.at_ms), line.actor,
                               line.role, line.action, line.subject, line.detail);
    }
    return kExitOk;
  }

 private:
  std::string since_ = "7d";
  std::uint64_t since_ms_ = 0;
  std::size_t limit_ = 10000;
};

}  // namespace

void add_audit_command(CommandList& commands) { commands.push_back(std::make_unique<AuditCommand>()); }

}  // namespace kiln::cli
