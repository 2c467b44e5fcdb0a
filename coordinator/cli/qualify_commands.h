// The kiln command's qualification subcommands: change, changes, bundle, bundles, smoke,
// nightly, qualify-release, runs, run, tickets. docs/qualification.md describes them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/error.h"

namespace CLI {
class App;
}

namespace kiln::cli {

class Client;
struct QualifyCommands;

struct QualifyCommandsDeleter {
  void operator()(QualifyCommands* commands) const;
};
using QualifyCommandsPtr = std::unique_ptr<QualifyCommands, QualifyCommandsDeleter>;

QualifyCommandsPtr add_qualify_commands(CLI::App& app);
// One of them was given on the command line.
bool qualify_command_parsed(const QualifyCommands& commands);
// Commands that need no coordinator (tickets), and arguments that are missing, are dealt with
// before connecting: `connect` is called only when a coordinator is needed. `argv` is the command
// line, for running a qualification in the background.
int run_qualify_command(QualifyCommands& commands, const std::function<Result<Client*>()>& connect, bool json,
                        int argc, char** argv);

}  // namespace kiln::cli
