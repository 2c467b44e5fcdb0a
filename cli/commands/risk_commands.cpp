// kiln risks, kiln waive, kiln waivers, kiln waiver withdraw: the risk register with each gate's
// latest verdict and its gaps, and the waivers of failing gates (docs/risks.md).
#include <chrono>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/text.h"
#include "qualification/risk_status.h"
#include "client/records_client.h"
#include "qualification/waiver.h"
#include "qualification/shell/lapsed_waivers.h"

namespace kiln::cli {
namespace {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

class RisksCommand : public RemoteCommand {
 public:
  std::string name() const override { return "risks"; }
  std::string help() const override {
    return "the risk register: each risk with its gate's latest verdict and age, and its gaps (exit 1 when there "
           "are any)";
  }
  void add_options(CLI::App& command) override { add_register_option(command, path_); }
  Status check_arguments() override {
    fill_from_environment(path_, "KILN_RISKS");
    return need(path_, "--register", "KILN_RISKS", "the risk register (risks.toml)");
  }
  int run_with(Client& client, CommandContext& context) override {
    auto loaded = load_register(path_);
    if (!loaded) return report(loaded.error());
    auto reports = qs::list_runs(client);
    if (!reports) return report(reports.error());
    auto stability_runs = qs::list_runs(client, protocol::RecordKind::stability_run);
    if (!stability_runs) return report(stability_runs.error());
    reports->insert(reports->end(), stability_runs->begin(), stability_runs->end());
    // A gate reads waived only by a waiver in force now, not one a report was recorded with.
    if (auto ok = qs::revoke_lapsed_waivers(client, *reports, wall_now_ms()); !ok) return report(ok.error());
    auto changes = qs::list_changes(client);
    if (!changes) return report(changes.error());
    const auto statuses = q::assess_risks(loaded->reg, loaded->set, q::gate_runs_from_reports(*reports), *changes,
                                          wall_now_ms());
    if (context.json()) {
      std::cout << q::to_json(statuses).dump(2) << "\n";
    } else {
      std::cout << q::risks_text(statuses);
    }
    return q::gap_count(statuses) == 0 ? kExitOk : kExitFailed;
  }

 private:
  std::string path_;
};

// An expiry: a duration from now (7d, 36h) or a UTC date, YYYY-MM-DD (its midnight) or
// YYYY-MM-DDTHH:MM.
Result<TimeMs> parse_expiry(const std::string& text, TimeMs now) {
  int year = 0;
  unsigned month = 0;
  unsigned day = 0;
  unsigned hour = 0;
  unsigned minute = 0;
  char tail = 0;
  const int fields = std::sscanf(text.c_str(), "%4d-%2u-%2uT%2u:%2u%c", &year, &month, &day, &hour, &minute, &tail);
  if (fields == 3 || fields == 5) {
    using namespace std::chrono;
    const year_month_day date{std::chrono::year{year}, std::chrono::month{month}, std::chrono::day{day}};
    if (!date.ok() || hour > 23 || minute > 59 || (fields == 3 && text.size() != 10)) {
      return fail(Errc::invalid_argument, fmt::format("--expires {}: not a date; give YYYY-MM-DD or YYYY-MM-DDTHH:MM "
                                                      "(UTC), or a duration such as 7d",
                                                      text));
    }
    const auto at = sys_days{date} + hours{hour} + minutes{minute};
    return duration_cast<milliseconds>(at.time_since_epoch()).count();
  }
  auto ms = parse_duration_ms(text, "--expires");
  if (!ms) {
    return fail(Errc::invalid_argument, ms.error().message + ", or a UTC date such as 2026-12-10 or 2026-12-10T18:00");
  }
  return now + static_cast<TimeMs>(*ms);
}

// The register the coordinator checks waivers against, as it holds it: `kiln waive` names the
// gates and approvers the coordinator will hold it to.
Result<q::RiskRegister> coordinator_register(Client& client) {
  auto held = expect_reply<protocol::RiskRegisterText>(client.request(protocol::GetRiskRegister{}));
  if (!held) return tl::unexpected(held.error());
  auto reg = q::parse_risk_register(held->toml, held->source);
  if (!reg) {
    return fail(Errc::config, fmt::format("the coordinator's risk register does not parse in this kiln ({}); use a "
                                          "kiln of the coordinator's version",
                                          reg.error().message));
  }
  return reg;
}

class WaiveCommand : public RemoteCommand {
 public:
  std::string name() const override { return "waive"; }
  std::string help() const override {
    return "waives a failing gate until an expiry (at most 30 days), as an approver of the gate's owning team: in one "
           "run (RUN) or in every run (a risk's id of the register the coordinator holds)";
  }
  void add_options(CLI::App& command) override {
    command.add_option("RUN_OR_RISK", scope_, "the run whose failure to waive, or a risk id of the register (its gate)")
        ->required();
    command.add_option("--model", model_, "the gate's model (a risk's own by default)");
    command.add_option("--metric", metric_, "the gate's metric: throughput, correctness, eval or loss_curve");
    command.add_option("--reason", reason_, "why the failure may ship, and what fixes it")->required();
    command.add_option("--expires", expires_, "when the waiver ends: a duration (7d) or a UTC date (2026-12-10)")
        ->required();
  }
  Status check_arguments() override {
    if (!metric_.empty() && !enum_from_name<q::GateMetric>(metric_)) {
      return fail(Errc::invalid_argument, fmt::format("--metric {}: give throughput, correctness, eval or loss_curve",
                                                      metric_));
    }
    return {};
  }
  int run_with(Client& client, CommandContext& context) override {
    auto reg = coordinator_register(client);
    if (!reg) return report(reg.error());
    q::Waiver waiver;
    waiver.scope = scope_;
    waiver.reason = reason_;
    if (const q::Risk* risk = reg->find(scope_); risk != nullptr && risk->gate) {
      if ((!model_.empty() && model_ != risk->gate->model) || (!metric_.empty() && metric_ != risk->gate->metric)) {
        return report(Error{Errc::invalid_argument,
                            fmt::format("risk {} gates {} {}; leave out --model and --metric, or give its own",
                                        scope_, risk->gate->model, risk->gate->metric)});
      }
      model_ = risk->gate->model;
      metric_ = risk->gate->metric;
    }
    if (model_.empty() || metric_.empty()) {
      return report(Error{Errc::invalid_argument, fmt::format("{} is not a risk of the register: waiving a run needs "
                                                              "--model and --metric",
                                                              scope_)});
    }
    const auto metric = enum_from_name<q::GateMetric>(metric_);
    if (!metric) {
      return report(Error{Errc::config, fmt::format("the register's gate metric '{}' is not one kiln judges", metric_)});
    }
    waiver.model = model_;
    waiver.metric = *metric;
    const TimeMs now = wall_now_ms();
    auto expires = parse_expiry(expires_, now);
    if (!expires) return report(expires.error());
    waiver.expires_at_ms = *expires;
    auto me = expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
    if (!me) return report(me.error());
    auto team = q::waiving_team(*reg, scope_, model_, *metric, me->key_name);
    if (!team) return report(team.error());
    waiver.team = *team;
    if (auto ok = q::validate_new_waiver(waiver, now); !ok) return report(ok.error());
    auto stored = qs::record_waiver(client, waiver);
    if (!stored) return report(stored.error());
    if (context.json()) {
      std::cout << q::to_json(*stored).dump(2) << "\n";
    } else {
      std::cout << fmt::format("gate {} {} ({}, team {}): {}\n", stored->model, enum_name(stored->metric),
                               stored->scope, stored->team, q::waiver_text(*stored));
    }
    return kExitOk;
  }

 private:
  std::string scope_;
  std::string model_;
  std::string metric_;
  std::string reason_;
  std::string expires_;
};

class WaiversCommand : public RemoteCommand {
 public:
  std::string name() const override { return "waivers"; }
  std::string help() const override {
    return "the waivers in force, each with its id (with --all also the expired and withdrawn ones)";
  }
  void add_options(CLI::App& command) override {
    command.add_flag("--all", all_, "also the waivers that have expired or were withdrawn");
  }
  int run_with(Client& client, CommandContext& context) override {
    auto waivers = qs::list_waivers(client);
    if (!waivers) return report(waivers.error());
    const TimeMs now = wall_now_ms();
    std::erase_if(*waivers, [&](const q::Waiver& w) { return !all_ && !q::in_force(w, now); });
    if (context.json()) {
      auto doc = nlohmann::json::array();
      for (const auto& w : *waivers) {
        auto entry = q::to_json(w);
        entry["id"] = q::waiver_key(w);
        entry["expired"] = w.expires_at_ms <= now;
        entry["in_force"] = q::in_force(w, now);
        entry["text"] = q::waiver_text(w);
        doc.push_back(std::move(entry));
      }
      std::cout << doc.dump(2) << "\n";
      return kExitOk;
    }
    if (waivers->empty()) {
      std::cout << (all_ ? "no waiver has been recorded\n" : "no waiver is in force\n");
      return kExitOk;
    }
    std::cout << fmt::format("{:<48} {:<16} {}\n", "ID", "TEAM", "WAIVER");
    for (const auto& w : *waivers) {
      const std::string state = !w.withdrawn_by.empty()   ? fmt::format("WITHDRAWN by {} ", w.withdrawn_by)
                                : w.expires_at_ms <= now ? std::string("EXPIRED ")
                                                         : std::string();
      std::cout << fmt::format("{:<48} {:<16} {}{}\n", q::waiver_key(w), w.team, state, q::waiver_text(w));
    }
    return kExitOk;
  }

 private:
  bool all_ = false;
};

// A waiver withdrawn before its expiry: from then on it lets nothing through, in any run, report
// or promotion (the coordinator records who withdrew it and when, and audits it).
class WaiverWithdrawCommand : public RemoteCommand {
 public:
  std::string name() const override { return "withdraw"; }
  std::string help() const override {
    return "withdraws a waiver in force (an approver of the team that waived it, or an admin): its gate blocks again";
  }
  void add_options(CLI::App& command) override {
    command.add_option("ID", id_, "the waiver's id, as `kiln waivers` lists it (SCOPE/MODEL/METRIC)")->required();
  }
  int run_with(Client& client, CommandContext& context) override {
    auto withdrawn = qs::withdraw_waiver(client, id_);
    if (!withdrawn) return report(withdrawn.error());
    if (context.json()) {
      std::cout << q::to_json(*withdrawn).dump(2) << "\n";
    } else {
      std::cout << fmt::format("withdrew {} ({}, team {}): it lets nothing through from now on\n", id_,
                               q::waiver_text(*withdrawn), withdrawn->team);
    }
    return kExitOk;
  }

 private:
  std::string id_;
};

}  // namespace

void add_risk_commands(CommandList& commands) {
  commands.push_back(std::make_unique<RisksCommand>());
  commands.push_back(std::make_unique<WaiveCommand>());
  commands.push_back(std::make_unique<WaiversCommand>());
  CommandList waiver;
  waiver.push_back(std::make_unique<WaiverWithdrawCommand>());
  commands.push_back(std::make_unique<CommandGroup>("waiver", "withdraw a waiver", std::move(waiver)));
}

}  // namespace kiln::cli
