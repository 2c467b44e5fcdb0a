// What the qualification commands share: the builder of bundles, the directories they read and
// write, and how a missing one is reported.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "qualification/model_set.h"
#include "records/risk_register.h"
#include "qualification/shell/bundle_builder.h"

namespace CLI {
class App;
}

namespace kiln::cli {

// The same builder makes `kiln bundle build`'s bundles and a run's bisection bundles.
struct BuilderOptions {
  std::string program;  // empty: the sim builder
  std::vector<std::string> args;
  std::string bundle_dir;
};
void add_builder_options(CLI::App& command, BuilderOptions& options);
// The configured builder (--builder), else the sim builder for these revisions.
std::unique_ptr<qualification::shell::BundleBuilder> configured_builder(const BuilderOptions& options,
                                                                        std::vector<std::string> revisions);

// Fills an option the command line left empty from its environment variable. (Read after
// parsing: CLI11 2.1 hands a variable to every subcommand declaring the option, parsed or not.)
void fill_from_environment(std::string& value, const char* variable);

// A directory or file the command needs: given by its option or its variable.
Status need(const std::string& value, std::string_view option, std::string_view variable, std::string_view what);

// The risk register (--register, else $KILN_RISKS) and the model set it names.
struct LoadedRegister {
  qualification::RiskRegister reg;
  qualification::ModelSet set;
};
Result<LoadedRegister> load_register(const std::string& path);
void add_register_option(CLI::App& command, std::string& path);

}  // namespace kiln::cli
