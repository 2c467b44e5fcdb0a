#include "cli/kiln_cli.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <iostream>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/version.h"
#include "cli/cli_options.h"
#include "cli/command.h"
#include "cli/commands/all.h"
#include "cli/exit_codes.h"

namespace kiln::cli {

CommandContext::CommandContext(std::string config_path, bool json, int argc, char** argv)
    : config_path_(std::move(config_path)), json_(json), argc_(argc), argv_(argv) {}

Result<Client*> CommandContext::client() {
  if (client_) return client_.get();
  auto config = load_client_config(config_path_);
  if (!config) return tl::unexpected(config.error());
  config_ = *config;
  // Watchers (kiln lease, --wait) keep following across a coordinator restart.
  Reconnect reconnect;
  reconnect.enabled = true;
  reconnect.notice = [](const std::string& text) { std::cerr << "kiln: " << text << "\n"; };
  auto made = Client::connect(config_, std::move(reconnect));
  if (!made) return tl::unexpected(made.error());
  client_ = std::move(*made);
  return client_.get();
}

const CommandList& Command::subcommands() const {
  static const CommandList none;
  return none;
}

CommandGroup::CommandGroup(std::string name, std::string help, CommandList subcommands)
    : name_(std::move(name)), help_(std::move(help)), subcommands_(std::move(subcommands)) {}

void CommandGroup::add_options(CLI::App& command) { command.require_subcommand(1); }

int CommandGroup::run(CommandContext&) { return kExitUsage; }  // CLI11 requires one of the subcommands

int RemoteCommand::run(CommandContext& context) {
  auto client = context.client();
  if (!client) return report(client.error());
  return run_with(**client, context);
}

namespace {

std::string config_path_default() {
  if (const char* env = std::getenv("KILN_CONFIG")) return env;
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.config/kiln/client.toml";
  return "client.toml";
}

struct Registered {
  Command* command;
  CLI::App* app;
};

void register_commands(CLI::App& parent, const CommandList& commands, std::vector<Registered>& registered) {
  for (const auto& command : commands) {
    CLI::App* app = parent.add_subcommand(command->name(), command->help());
    command->add_options(*app);
    registered.push_back({command.get(), app});
    register_commands(*app, command->subcommands(), registered);
  }
}

// Where the first word that is not a global option is: the command the user meant (argc: none).
int first_command_index(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--config") {
      ++i;
      continue;
    }
    if (word.empty() || word[0] == '-') continue;
    return i;
  }
  return argc;
}

std::vector<std::string> names_of(const CommandList& commands) {
  std::vector<std::string> names;
  for (const auto& command : commands) names.push_back(command->name());
  return names;
}

// `kiln nods` or `kiln bundle nope` (also with --help) says it is not a command and names the
// near ones.
int unknown_command(const std::string& word, const std::string& path, const CommandList& commands) {
  const auto near = near_names(word, names_of(commands));
  std::cerr << (path == "kiln" ? fmt::format("kiln: '{}' is not a kiln command.", word)
                               : fmt::format("kiln: '{}' is not a `{}` command.", word, path));
  if (!near.empty()) std::cerr << fmt::format(" Did you mean: {}?", fmt::join(near, ", "));
  std::cerr << fmt::format(" `{} --help` lists them all.\n", path);
  return kExitUsage;
}

// The command words as given: each group (`kiln bundle`) must be followed by one of its
// commands. A usage error if not; nothing when CLI11 should parse the line.
std::optional<int> check_command_words(int argc, char** argv, const CommandList& top) {
  const CommandList* level = &top;
  std::string path = "kiln";
  int i = first_command_index(argc, argv);
  if (i == argc) return std::nullopt;  // a bare `kiln`: CLI11's usage
  for (bool needs_command = true; needs_command; ++i) {
    if (i == argc) {
      std::cerr << fmt::format("kiln: `{}` needs a command: {}. `{} --help` says more.\n", path,
                               fmt::join(names_of(*level), ", "), path);
      return kExitUsage;
    }
    const std::string word = argv[i];
    if (word.starts_with("-")) return std::nullopt;  // --help and the like
    auto named = std::find_if(level->begin(), level->end(), [&](const auto& c) { return c->name() == word; });
    if (named == level->end()) return unknown_command(word, path, *level);
    path += " " + word;
    level = &(*named)->subcommands();
    needs_command = dynamic_cast<const CommandGroup*>(named->get()) != nullptr;
  }
  return std::nullopt;
}

}  // namespace

int run_kiln(int argc, char** argv) {
  CommandList commands = all_commands();
  if (auto refused = check_command_words(argc, argv, commands)) return *refused;

  CLI::App app{"kiln: model CI on your accelerators. Talks to kiln-coordinator. docs/cli.md describes every command."};
  app.set_version_flag("--version", version_text("kiln"));
  app.require_subcommand(1);
  app.fallthrough();  // --config and --json may also follow the subcommand
  std::string config_path = config_path_default();
  bool json = false;
  app.add_option("--config", config_path, "client.toml (default: $KILN_CONFIG or ~/.config/kiln/client.toml)");
  app.add_flag("--json", json, "print machine-readable JSON");
  std::vector<Registered> registered;
  register_commands(app, commands, registered);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  // The deepest parsed command is the one given (`kiln bundle build`, not `kiln bundle`).
  Command* given = nullptr;
  for (const auto& r : registered) {
    if (r.app->parsed()) given = r.command;
  }
  if (given == nullptr) return kExitUsage;
  if (auto ok = given->check_arguments(); !ok) return report(ok.error());
  CommandContext context(config_path, json, argc, argv);
  return given->run(context);
}

}  // namespace kiln::cli
