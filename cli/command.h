// One kiln subcommand: its name, its help, the options it registers on its own CLI11
// subcommand, and what it does. kiln_cli.cpp registers every command of commands/all.h and runs
// the one given. CLI11 stays in the .cpp files: this header only names CLI::App.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "client/client.h"

namespace CLI {
class App;
}

namespace kiln::cli {

// What every command gets: the global options, the command line, and a connection to the
// coordinator made on first use (commands that only read files never connect).
class CommandContext {
 public:
  CommandContext(std::string config_path, bool json, int argc, char** argv);

  bool json() const { return json_; }
  int argc() const { return argc_; }
  char** argv() const { return argv_; }
  // Loads client.toml and connects, once.
  Result<Client*> client();
  // The client configuration; valid once client() succeeded.
  const ClientConfig& client_config() const { return config_; }

 private:
  std::string config_path_;
  bool json_;
  int argc_;
  char** argv_;
  ClientConfig config_;
  std::unique_ptr<Client> client_;
};

class Command;
using CommandList = std::vector<std::unique_ptr<Command>>;

class Command {
 public:
  virtual ~Command() = default;
  virtual std::string name() const = 0;
  virtual std::string help() const = 0;
  // Registers the command's options and positionals on its subcommand.
  virtual void add_options(CLI::App& command) = 0;
  // What parsing cannot check (an argument given either way, a duration), before anything runs.
  virtual Status check_arguments() { return {}; }
  // Runs it after parsing; returns the exit code (exit_codes.h).
  virtual int run(CommandContext& context) = 0;
  // A command with subcommands (`kiln bundle build`) is a group: one of them must be given.
  virtual const CommandList& subcommands() const;
};

// A group of subcommands that does nothing by itself (`kiln change`, `kiln bundle`).
class CommandGroup : public Command {
 public:
  CommandGroup(std::string name, std::string help, CommandList subcommands);
  std::string name() const override { return name_; }
  std::string help() const override { return help_; }
  void add_options(CLI::App& command) override;
  int run(CommandContext& context) override;
  const CommandList& subcommands() const override { return subcommands_; }

 private:
  std::string name_;
  std::string help_;
  CommandList subcommands_;
};

// A command that talks to the coordinator: run() connects (or reports why it cannot), then
// hands the connection to run_with().
class RemoteCommand : public Command {
 public:
  int run(CommandContext& context) final;

 protected:
  virtual int run_with(Client& client, CommandContext& context) = 0;
};

}  // namespace kiln::cli
