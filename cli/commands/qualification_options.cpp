#include "cli/commands/qualification_options.h"

#include <cstdlib>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace kiln::cli {

namespace qs = kiln::qualification::shell;

void add_builder_options(CLI::App& command, BuilderOptions& options) {
  command.add_option("--builder", options.program,
                     "a program that builds the bundle and prints it as JSON (default: $KILN_BUILDER, else the sim "
                     "builder)");
  command.add_option("--builder-arg", options.args, "an argument for it; {change}, {index} and {out} are replaced");
}

std::unique_ptr<qs::BundleBuilder> configured_builder(const BuilderOptions& options,
                                                      std::vector<std::string> revisions) {
  return qs::make_configured_builder(options.program, options.args, options.bundle_dir, std::move(revisions));
}

void fill_from_environment(std::string& value, const char* variable) {
  const char* set = std::getenv(variable);
  if (value.empty() && set != nullptr) value = set;
}

Status need(const std::string& value, std::string_view option, std::string_view variable, std::string_view what) {
  if (!value.empty()) return {};
  return fail(Errc::invalid_argument, fmt::format("say where {} is: {} PATH, or set {}", what, option, variable));
}

Result<LoadedRegister> load_register(const std::string& path) {
  if (auto ok = need(path, "--register", "KILN_RISKS", "the risk register (risks.toml)"); !ok) {
    return tl::unexpected(ok.error());
  }
  auto reg = qualification::load_risk_register_file(path);
  if (!reg) return fail(Errc::config, reg.error().message);
  auto set = qualification::load_model_set_file(reg->model_set);
  if (!set) {
    return fail(Errc::config, fmt::format("{}: model_set: {}", path, set.error().message));
  }
  return LoadedRegister{std::move(*reg), std::move(*set)};
}

void add_register_option(CLI::App& command, std::string& path) {
  command.add_option("--register", path, "the risk register, risks.toml (default: $KILN_RISKS)");
}

}  // namespace kiln::cli
