// kiln runs, kiln run ID, kiln tickets: what qualification runs have recorded.
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coordinator/cli/commands/all.h"
#include "coordinator/cli/commands/qualification_options.h"
#include "coordinator/cli/exit_codes.h"
#include "coordinator/qualification/shell/records_client.h"
#include "coordinator/qualification/ticket.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

class RunsCommand : public RemoteCommand {
 public:
  std::string name() const override { return "runs"; }
  std::string help() const override { return "list qualification runs and their verdicts"; }
  void add_options(CLI::App&) override {}
  int run_with(Client& client, CommandContext& context) override {
    auto runs = qs::list_runs(client);
    if (!runs) return report(runs.error());
    if (context.json()) {
      std::cout << nlohmann::json(*runs).dump(2) << "\n";
      return kExitOk;
    }
    if (runs->empty()) {
      std::cout << "no qualification runs yet; kiln smoke, kiln nightly or kiln qualify-release\n";
      return kExitOk;
    }
    const auto row = [](const auto&... columns) {
      std::cout << fmt::format("{:<36} {:<8} {:<12} {:>6} {:<9}\n", columns...);
    };
    row("RUN", "TIER", "BUNDLE", "MODELS", "VERDICT");
    for (const auto& run : *runs) {
      const bool finished = run.value("finished", false);
      const std::string verdict = !finished ? "running" : run.value("passed", false) ? "passed" : "failed";
      row(run.value("run_id", ""), run.value("tier", ""), run.value("candidate_bundle_id", "").substr(0, 12),
          run.contains("models") ? run["models"].size() : 0, verdict);
    }
    return kExitOk;
  }
};

class RunShowCommand : public RemoteCommand {
 public:
  std::string name() const override { return "run"; }
  std::string help() const override { return "show one qualification run (progress while it runs)"; }
  void add_options(CLI::App& command) override { command.add_option("ID", id_, "run id")->required(); }
  int run_with(Client& client, CommandContext& context) override {
    auto run = qs::get_run(client, id_);
    if (!run) return report(run.error());
    if (context.json()) {
      std::cout << run->dump(2) << "\n";
    } else {
      std::cout << run->value("summary", std::string("(no summary recorded)"));
      if (!run->value("finished", false)) std::cout << "(still running)\n";
    }
    return run->value("finished", false) && !run->value("passed", false) ? kExitFailed : kExitOk;
  }

 private:
  std::string id_;
};

class TicketsCommand : public Command {
 public:
  std::string name() const override { return "tickets"; }
  std::string help() const override { return "list the tickets in the ticket directory"; }
  void add_options(CLI::App& command) override {
    command.add_option("--tickets-dir", dir_, "the ticket sink's directory (default: $KILN_TICKETS_DIR)");
  }
  Status check_arguments() override {
    fill_from_environment(dir_, "KILN_TICKETS_DIR");
    if (auto ok = need(dir_, "--tickets-dir", "KILN_TICKETS_DIR", "the ticket directory"); !ok) return ok;
    if (std::filesystem::is_directory(dir_)) return {};
    return fail(Errc::not_found,
                fmt::format("{} is not a ticket directory; give the --tickets-dir the runs used", dir_));
  }
  int run(CommandContext& context) override {
    auto sink = q::DirectoryTicketSink::open(dir_);
    if (!sink) return report(sink.error());
    auto tickets = sink->list();
    if (!tickets) return report(tickets.error());
    if (context.json()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& ticket : *tickets) out.push_back(nlohmann::json::parse(q::to_json_text(ticket)));
      std::cout << out.dump(2) << "\n";
      return kExitOk;
    }
    if (tickets->empty()) std::cout << "no tickets in " << dir_ << "\n";
    for (const auto& ticket : *tickets) {
      std::cout << fmt::format("{}  {:<22} {:<16} {:<14} {}\n", ticket.id, q::to_string(ticket.kind), ticket.team,
                               ticket.culprit_change, ticket.title);
    }
    return kExitOk;
  }

 private:
  std::string dir_;
};

}  // namespace

void add_record_commands(CommandList& commands) {
  commands.push_back(std::make_unique<RunsCommand>());
  commands.push_back(std::make_unique<RunShowCommand>());
  commands.push_back(std::make_unique<TicketsCommand>());
}

}  // namespace kiln::cli
