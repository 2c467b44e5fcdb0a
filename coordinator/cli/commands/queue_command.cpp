// kiln queue ID: why a job or lease is pending and when it should start.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/protocol/json.h"
#include "coordinator/cli/cli_options.h"
#include "coordinator/cli/commands/all.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/cli/ids.h"
#include "coordinator/cli/text.h"

namespace kiln::cli {

namespace {

class QueueCommand : public RemoteCommand {
 public:
  std::string name() const override { return "queue"; }
  std::string help() const override { return "explain why a job or lease is pending and when it should start"; }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_text_, "a job id (42) or a lease id (L3)");
    add_deprecated_option(command, "--why", "kiln queue ID", [this](const std::string& v) { id_text_ = v; });
  }
  Status check_arguments() override {
    if (id_text_.empty()) return fail(Errc::invalid_argument, "say which job or lease: kiln queue 42 or kiln queue L3");
    auto id = parse_job_or_lease_id(id_text_);
    if (!id) return tl::unexpected(id.error());
    request_.job_id = id->job_id;
    request_.lease_id = id->lease_id;
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
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
  std::string id_text_;
  protocol::QueueWhy request_;
};

}  // namespace

void add_queue_command(CommandList& commands) { commands.push_back(std::make_unique<QueueCommand>()); }

}  // namespace kiln::cli
