#include "qualification/shell/bundle_builder.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/process/process_runner.h"
#include "client/records_client.h"

namespace kiln::qualification::shell {
namespace {

namespace fs = std::filesystem;

Status write_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      return fail(Errc::io, fmt::format("cannot write {}; check that the bundle directory is writable", temporary.string()));
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    return fail(Errc::io, fmt::format("cannot move {} into place: {}", temporary.string(), error.message()));
  }
  return {};
}

class SimBuilder final : public BundleBuilder {
 public:
  SimBuilder(fs::path dir, SimBuilderOptions options) : dir_(std::move(dir)), options_(std::move(options)) {}

  Result<Bundle> build(const std::vector<Change>& history, std::size_t index) override {
    auto bundle = build_bundle_at(history, index, options_);
    if (!bundle) return bundle;
    auto stack = sim_stack_effects_toml(history, index);
    if (!stack) return tl::unexpected(stack.error());
    std::error_code error;
    fs::create_directories(dir_, error);
    if (error) {
      return fail(Errc::io, fmt::format("cannot create the bundle directory {}: {}", dir_.string(), error.message()));
    }
    if (auto written = write_atomically(stack_effects_path(dir_, bundle->id), *stack); !written) {
      return tl::unexpected(written.error());
    }
    return bundle;
  }

 private:
  fs::path dir_;
  SimBuilderOptions options_;
};

class CommandBuilder final : public BundleBuilder {
 public:
  CommandBuilder(CommandBuilderConfig config, fs::path work_dir)
      : config_(std::move(config)), work_dir_(std::move(work_dir)) {}

  Result<Bundle> build(const std::vector<Change>& history, std::size_t index) override {
    if (auto ok = validate(config_); !ok) return tl::unexpected(ok.error());
    if (index >= history.size()) {
      return fail(Errc::invalid_argument, fmt::format("no change at index {} in a history of {}", index, history.size()));
    }
    const fs::path out = work_dir_ / fmt::format("build-{}", history[index].id);
    auto argv = expand_command(config_, history[index].id, index, out.string());
    ProcessSpec spec;
    spec.program = argv.front();
    spec.args.assign(argv.begin() + 1, argv.end());
    spec.env_extra = config_.environment;
    spec.work_dir = out.string();
    spec.timeout_ms = config_.timeout_ms;
    spec.output_limit_bytes = config_.max_output_bytes;
    auto exit = run_to_completion(spec);
    if (!exit) return tl::unexpected(exit.error());
    if (!exit->succeeded()) {
      return fail(Errc::internal, fmt::format("the bundle builder {} failed for change {}: {}; its output is in {}",
                                            config_.program, history[index].id, exit->detail, exit->output_path));
    }
    // The captured output holds stdout and stderr together: the bundle is its last JSON line.
    std::ifstream in(exit->output_path);
    std::string line;
    std::string last_json;
    while (std::getline(in, line)) {
      if (!line.empty() && line.front() == '{') last_json = line;
    }
    auto json = nlohmann::json::parse(last_json, nullptr, false);
    if (last_json.empty() || json.is_discarded()) {
      return fail(Errc::bad_message, fmt::format("the bundle builder {} printed no bundle JSON line for change {}; "
                                                 "it must print the bundle (kiln.bundle/2) as one line on stdout",
                                                 config_.program, history[index].id));
    }
    auto bundle = bundle_from_json(json);
    if (!bundle) return bundle;
    if (bundle->listed_change_ids) {
      return fail(Errc::bad_message, fmt::format("the bundle builder {} printed a kiln.bundle/1 bundle, which lists "
                                                 "every change and outgrows a record as the history grows; print "
                                                 "kiln.bundle/2 (change_count and last_change; docs/qualification.md)",
                                                 config_.program));
    }
    if (bundle->change_count != index + 1 || bundle->last_change != history[index].id) {
      return fail(Errc::integrity, fmt::format("the bundle the builder made for change {} holds {} changes up to {}, "
                                               "not the {} up to it; fix the builder",
                                               history[index].id, bundle->change_count, bundle->last_change,
                                               index + 1));
    }
    return bundle;
  }

 private:
  CommandBuilderConfig config_;
  fs::path work_dir_;
};

}  // namespace

fs::path stack_effects_path(const fs::path& bundle_dir, const std::string& bundle_id) {
  return bundle_dir / (bundle_id + ".stack.toml");
}

std::unique_ptr<BundleBuilder> make_sim_builder(fs::path bundle_dir, SimBuilderOptions options) {
  return std::make_unique<SimBuilder>(std::move(bundle_dir), std::move(options));
}

std::unique_ptr<BundleBuilder> make_command_builder(CommandBuilderConfig config, fs::path work_dir) {
  return std::make_unique<CommandBuilder>(std::move(config), std::move(work_dir));
}

std::unique_ptr<BundleBuilder> make_configured_builder(const std::string& program, const std::vector<std::string>& args,
                                                       const std::filesystem::path& bundle_dir,
                                                       std::vector<std::string> revisions) {
  if (program.empty()) {
    SimBuilderOptions sim;
    sim.hardware_revisions = std::move(revisions);
    return make_sim_builder(bundle_dir, sim);
  }
  CommandBuilderConfig config;
  config.program = program;
  config.args = args;
  return make_command_builder(config, bundle_dir);
}

Result<RecordedBundle> build_recorded_bundle(cli::Client& client, BundleBuilder& builder, const std::string& at_change) {
  auto history = list_changes(client);
  if (!history) return tl::unexpected(history.error());
  return build_recorded_bundle(client, builder, at_change, *history);
}

Result<RecordedBundle> build_recorded_bundle(cli::Client& client, BundleBuilder& builder, const std::string& at_change,
                                             const std::vector<Change>& history) {
  if (history.empty()) {
    return fail(Errc::not_found, "no changes are recorded; record them first (kiln change import FILE)");
  }
  std::size_t index = history.size() - 1;
  if (!at_change.empty()) {
    auto it = std::find_if(history.begin(), history.end(), [&](const Change& c) { return c.id == at_change; });
    if (it == history.end()) {
      return fail(Errc::not_found, fmt::format("change {} is not recorded; `kiln changes` lists them", at_change));
    }
    index = static_cast<std::size_t>(it - history.begin());
  }
  auto bundle = builder.build(history, index);
  if (!bundle) return tl::unexpected(bundle.error());
  if (auto ok = record_bundle(client, *bundle); !ok) return tl::unexpected(ok.error());
  return RecordedBundle{std::move(*bundle), history[index].id};
}

}  // namespace kiln::qualification::shell
