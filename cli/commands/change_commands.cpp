// kiln change add, kiln change import FILE, kiln changes.
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands/all.h"
#include "cli/exit_codes.h"
#include "cli/text.h"
#include "client/records_client.h"

namespace kiln::cli {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

nlohmann::json changes_json(const std::vector<q::Change>& changes) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& change : changes) out.push_back(q::to_json(change));
  return out;
}

// change add and change import: the changes they make, then recorded and reported alike.
class RecordChangesCommand : public RemoteCommand {
 protected:
  virtual Result<std::vector<q::Change>> changes() = 0;
  int run_with(Client& client, CommandContext& context) override {
    auto made = changes();
    if (!made) return report(made.error());
    for (const auto& change : *made) {
      if (auto ok = qs::record_change(client, change); !ok) return report(ok.error());
    }
    if (context.json()) std::cout << changes_json(*made).dump(2) << "\n";
    else std::cout << fmt::format("recorded {} change{}\n", made->size(), made->size() == 1 ? "" : "s");
    return kExitOk;
  }
};

class ChangeAddCommand : public RecordChangesCommand {
 public:
  std::string name() const override { return "add"; }
  std::string help() const override { return "record one merged change"; }
  void add_options(CLI::App& command) override {
    command.add_option("--id", change_.id, "the change's id (commit)")->required();
    command.add_option("--layer", layer_, "model, framework, compiler, kernels, runtime, driver or firmware")
        ->required();
    command.add_option("--owner", change_.owner_team, "the team that owns it (gets its tickets)")->required();
    command.add_option("--components", change_.components, "what it touched: kernels, or model names")
        ->delimiter(',');
    command.add_option("--summary", change_.summary, "one line");
    command.add_option("--merged-at-ms", change_.merged_at_ms, "merge time, ms since the epoch (default: now)");
  }

 protected:
  Result<std::vector<q::Change>> changes() override {
    const auto layer = q::layer_from_string(layer_);
    if (!layer) {
      return fail(Errc::invalid_argument, fmt::format("--layer {} is not one of model, framework, compiler, kernels, "
                                                      "runtime, driver, firmware",
                                                      layer_));
    }
    change_.layer = *layer;
    if (change_.merged_at_ms == 0) change_.merged_at_ms = wall_now_ms();
    return std::vector<q::Change>{change_};
  }

 private:
  q::Change change_;
  std::string layer_;
};

class ChangeImportCommand : public RecordChangesCommand {
 public:
  std::string name() const override { return "import"; }
  std::string help() const override { return "record every change of a history file ([[change]] TOML)"; }
  void add_options(CLI::App& command) override {
    command.add_option("FILE", file_, "the history, in merge order")->required();
  }

 protected:
  Result<std::vector<q::Change>> changes() override {
    std::ifstream in(file_, std::ios::binary);
    if (!in) return fail(Errc::config, fmt::format("cannot read {}; check the path", file_));
    std::ostringstream text;
    text << in.rdbuf();
    return q::parse_change_history(text.str(), file_, wall_now_ms());
  }

 private:
  std::string file_;
};

class ChangesCommand : public RemoteCommand {
 public:
  std::string name() const override { return "changes"; }
  std::string help() const override { return "list the recorded changes in merge order"; }
  void add_options(CLI::App&) override {}
  int run_with(Client& client, CommandContext& context) override {
    auto changes = qs::list_changes(client);
    if (!changes) return report(changes.error());
    if (context.json()) {
      std::cout << changes_json(*changes).dump(2) << "\n";
      return kExitOk;
    }
    if (changes->empty()) {
      std::cout << "no changes recorded; kiln change add or kiln change import\n";
      return kExitOk;
    }
    const auto row = [](const auto&... columns) {
      std::cout << fmt::format("{:<5} {:<12} {:<10} {:<18} {:<21} {}\n", columns...);
    };
    row("#", "CHANGE", "LAYER", "OWNER", "MERGED", "SUMMARY");
    for (std::size_t i = 0; i < changes->size(); ++i) {
      const auto& change = (*changes)[i];
      row(i, change.id, q::to_string(change.layer), change.owner_team, utc_time_text(change.merged_at_ms),
          change.summary);
    }
    return kExitOk;
  }
};

}  // namespace

void add_change_commands(CommandList& commands) {
  CommandList change;
  change.push_back(std::make_unique<ChangeAddCommand>());
  change.push_back(std::make_unique<ChangeImportCommand>());
  commands.push_back(std::make_unique<CommandGroup>(
      "change", "record merged changes: add one, or import a history file", std::move(change)));
  commands.push_back(std::make_unique<ChangesCommand>());
}

}  // namespace kiln::cli
