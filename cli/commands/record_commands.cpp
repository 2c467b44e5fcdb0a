// kiln runs, kiln run ID, kiln tickets, kiln ticket ack|fix|duplicate|reopen: what qualification
// runs have recorded, and people's word on its tickets.
#include <algorithm>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cli_options.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/commands/qualification_run.h"
#include "cli/exit_codes.h"
#include "cli/text.h"
#include "cli/wait_progress.h"
#include "qualification/run_verdict.h"
#include "client/records_client.h"
#include "records/ticket_record.h"
#include "report/report_files.h"
#include "qualification/shell/lapsed_waivers.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

class RunsCommand : public RemoteCommand {
 public:
  std::string name() const override { return "runs"; }
  std::string help() const override { return "list the latest qualification runs and their verdicts"; }
  void add_options(CLI::App& command) override { latest_.add_to(command, "runs"); }
  int run_with(Client& client, CommandContext& context) override {
    // Only the latest are read: every run recorded is months of reports.
    bool more = false;
    std::size_t read = 0;
    const auto enough = [&](const nlohmann::json&) { return more = ++read > latest_.count(); };
    auto runs = qs::list_latest_runs(client, enough);
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
      const std::string verdict = q::run_verdict(run).word;
      row(run.value("run_id", ""), run.value("tier", ""), run.value("candidate_bundle_id", "").substr(0, 12),
          run.contains("models") ? run["models"].size() : 0, verdict);
    }
    if (more) std::cout << latest_.more_note("runs");
    return kExitOk;
  }

 private:
  LatestOptions latest_;
};

// kiln run cancel ID: records the cancel, which the qualifier driving the run (or the next one to
// take it up) honours: it cancels the run's jobs and ends it with the error verdict.
class RunCancelCommand : public RemoteCommand {
 public:
  std::string name() const override { return "cancel"; }
  std::string help() const override {
    return "stop a qualification run: the qualifier cancels its jobs and ends it with the error verdict";
  }
  void add_options(CLI::App& command) override { command.add_option("ID", id_, "run id")->required(); }
  int run_with(Client& client, CommandContext& context) override {
    if (auto run = qs::get_run(client, id_); run && run->value("finished", false)) {
      return report({Errc::conflict, fmt::format("run {} has already finished ({}); there is nothing to cancel", id_,
                                                 q::run_verdict(*run).word)});
    }
    if (auto ok = qs::cancel_run(client, id_); !ok) return report(ok.error());
    if (context.json()) {
      std::cout << nlohmann::json{{"run_id", id_}, {"cancel_recorded", true}}.dump() << "\n";
    } else {
      std::cout << fmt::format("run {}: cancel recorded; the qualifier cancels its jobs and ends it with the error "
                               "verdict (`kiln run {}` shows it)\n",
                               id_, id_);
    }
    return kExitOk;
  }

 private:
  std::string id_;
};

class RunShowCommand : public RemoteCommand {
 public:
  RunShowCommand() { subcommands_.push_back(std::make_unique<RunCancelCommand>()); }
  std::string name() const override { return "run"; }
  std::string help() const override {
    return "show one qualification run (progress while it runs); `run cancel ID` stops one";
  }
  const CommandList& subcommands() const override { return subcommands_; }
  void add_options(CLI::App& command) override {
    // Not required of CLI11: `kiln run cancel ID` gives none (check_arguments asks for it).
    command.add_option("ID", id_, "run id");
    command.add_flag("--wait", wait_, "follow the run until its verdict (also one not asked for yet, such as "
                                      "tonight's scheduled nightly); the exit code is the verdict");
    command.add_option("--junit", junit_path_, "with --wait: write the verdict as JUnit XML here");
    command.add_option("--html", html_path_, "also write the run's page here (HTML with its plots, for a browser; "
                                             "with --wait, once the run has its verdict)");
  }
  Status check_arguments() override {
    if (id_.empty()) return fail(Errc::invalid_argument, "kiln run needs a run id (`kiln runs` lists them)");
    if (!junit_path_.empty() && !wait_) {
      return fail(Errc::invalid_argument, "--junit needs --wait: the verdict is written once the run has one");
    }
    if (auto ok = check_output_path("--junit", junit_path_); !ok) return ok;
    return check_output_path("--html", html_path_);
  }
  int run_with(Client& client, CommandContext& context) override {
    const int verdict = wait_ ? follow_to_verdict(client, id_, junit_path_, context.json()) : show(client, context);
    // An `error` run (exit 2) has a page too; a run that could not be read has none.
    if (html_path_.empty() || verdict == kExitRefused || verdict == kExitUnreachable || verdict == kExitNotFound) {
      return verdict;
    }
    if (auto ok = write_page(client); !ok) return report(ok.error());
    std::cerr << fmt::format("kiln: wrote the page of run {} to {}; open it in a browser\n", id_, html_path_);
    return verdict;
  }

 private:
  int show(Client& client, CommandContext& context) {
    auto run = qs::get_run(client, id_);
    if (!run) return report(run.error());
    // The verdict by the waivers in force now, not those the report was recorded with.
    if (auto ok = qs::revoke_lapsed_waivers(client, *run, wall_now_ms()); !ok) return report(ok.error());
    if (context.json()) {
      std::cout << run->dump(2) << "\n";
    } else {
      std::cout << run->value("summary", std::string("(no summary recorded)"));
      if (!run->value("finished", false)) {
        // What it waits for now, and why: the jobs it has in flight as the coordinator sees them.
        const auto lines = run_status_lines(*run, read_fleet(client, wall_now_ms()));
        std::cout << "(still running) " << lines.front() << "\n";
        for (std::size_t i = 1; i < lines.size(); ++i) std::cout << "  " << lines[i] << "\n";
      }
    }
    return verdict_exit_code(*run);
  }

  // The page as the qualifier writes it, from the recorded report and its history: the runs
  // recorded before it, read newest first until each of its models has its plot's worth.
  Status write_page(Client& client) {
    auto record = expect_reply<protocol::RecordEntry>(
        client.request(protocol::GetRecord{protocol::RecordKind::qualification_run, id_}));
    if (!record) return tl::unexpected(record.error());
    auto header = nlohmann::json::parse(record->document, nullptr, false);
    if (header.is_discarded()) return fail(Errc::bad_message, fmt::format("run {}'s recorded report is not JSON", id_));
    auto whole = qs::whole_run(client, std::move(header));
    if (!whole) return tl::unexpected(whole.error());
    const nlohmann::json& run = *whole;
    std::map<std::pair<std::string, std::string>, std::size_t> points;
    for (const auto& entry : kiln::report::digest_of(run).throughputs) points[{entry.model, entry.revision}] = 0;
    const auto enough = [&points](const nlohmann::json& earlier) {
      if (std::all_of(points.begin(), points.end(),
                      [](const auto& pair) { return pair.second >= kiln::report::kHistoryRuns; })) {
        return true;
      }
      for (const auto& entry : kiln::report::digest_of(earlier).throughputs) {
        if (auto it = points.find({entry.model, entry.revision}); it != points.end()) ++it->second;
      }
      return false;
    };
    auto runs = qs::list_latest_runs(client, enough, protocol::RecordKind::qualification_run, record->seq);
    if (!runs) return tl::unexpected(runs.error());
    return kiln::report::write_file_atomically(html_path_,
                                               kiln::report::render_run_page(run, kiln::report::digests_of(*runs)));
  }

  CommandList subcommands_;
  std::string id_;
  std::string junit_path_;
  std::string html_path_;
  bool wait_ = false;
};

// The tickets the qualifiers filed, as the coordinator keeps them: from any host.
class TicketsCommand : public RemoteCommand {
 public:
  std::string name() const override { return "tickets"; }
  std::string help() const override { return "list the tickets the qualification runs filed, with their state"; }
  void add_options(CLI::App& command) override {
    command.add_option("--state", state_, "only tickets in this state: open, acknowledged, fixed or duplicate");
  }
  Status check_arguments() override {
    if (state_.empty() || protocol::enum_from_name<q::TicketState>(state_)) return {};
    return fail(Errc::invalid_argument,
                fmt::format("--state {} is not a ticket state; give open, acknowledged, fixed or duplicate", state_));
  }
  int run_with(Client& client, CommandContext& context) override {
    auto tickets = qs::list_tickets(client);
    if (!tickets) return report(tickets.error());
    if (!state_.empty()) {
      std::erase_if(*tickets, [&](const q::TicketRecord& t) { return protocol::enum_name(t.state) != state_; });
    }
    if (context.json()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& ticket : *tickets) out.push_back(q::to_json(ticket));
      std::cout << out.dump(2) << "\n";
      return kExitOk;
    }
    if (tickets->empty()) {
      std::cout << (state_.empty() ? "no tickets filed yet\n" : fmt::format("no {} tickets\n", state_));
      return kExitOk;
    }
    const auto row = [](const auto&... columns) {
      std::cout << fmt::format("{:<21} {:<12} {:<22} {:<16} {:<14} {}\n", columns...);
    };
    row("ID", "STATE", "KIND", "TEAM", "CULPRIT", "RUN");
    for (const auto& t : *tickets) {
      row(t.ticket.id, protocol::enum_name(t.state), q::to_string(t.ticket.kind), t.ticket.team,
          t.ticket.culprit_change, t.run_id);
    }
    return kExitOk;
  }

 private:
  std::string state_;
};

// kiln ticket ack|fix|duplicate|reopen ID: a person's word on a ticket.
class TicketStateCommand : public RemoteCommand {
 public:
  TicketStateCommand(std::string name, std::string help, q::TicketState state)
      : name_(std::move(name)), help_(std::move(help)), state_(state) {}
  std::string name() const override { return name_; }
  std::string help() const override { return help_; }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_, "ticket id (kiln tickets lists them)")->required();
    if (state_ == q::TicketState::duplicate) {
      command.add_option("--of", of_, "the ticket this one duplicates")->required();
    }
  }
  int run_with(Client& client, CommandContext& context) override {
    auto ticket = qs::set_ticket_state(client, protocol::SetTicketState{id_, state_, of_});
    if (!ticket) return report(ticket.error());
    if (context.json()) {
      std::cout << q::to_json(*ticket).dump(2) << "\n";
    } else if (ticket->state == q::TicketState::duplicate) {
      std::cout << fmt::format("ticket {} is a duplicate of {}\n", ticket->ticket.id, ticket->duplicate_of);
    } else {
      std::cout << fmt::format("ticket {} is {}\n", ticket->ticket.id, protocol::enum_name(ticket->state));
    }
    return kExitOk;
  }

 private:
  std::string name_;
  std::string help_;
  q::TicketState state_;
  std::string id_;
  std::string of_;
};

}  // namespace

void add_record_commands(CommandList& commands) {
  commands.push_back(std::make_unique<RunsCommand>());
  commands.push_back(std::make_unique<RunShowCommand>());
  commands.push_back(std::make_unique<TicketsCommand>());
  CommandList ticket;
  ticket.push_back(std::make_unique<TicketStateCommand>("ack", "acknowledge a ticket: its team has it in hand",
                                                        q::TicketState::acknowledged));
  ticket.push_back(std::make_unique<TicketStateCommand>("fix", "mark a ticket fixed", q::TicketState::fixed));
  ticket.push_back(std::make_unique<TicketStateCommand>("duplicate", "mark a ticket a duplicate of another (--of)",
                                                        q::TicketState::duplicate));
  ticket.push_back(std::make_unique<TicketStateCommand>("reopen", "open a ticket again", q::TicketState::open));
  commands.push_back(
      std::make_unique<CommandGroup>("ticket", "change a ticket's state: ack, fix, duplicate, reopen", std::move(ticket)));
}

}  // namespace kiln::cli
