// Builders: make the bundle containing history[0..index]. The sim builder computes it at once
// and writes the stack-effects file the sim workloads read; the command builder runs a
// configured program (a real build) that prints the bundle.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "client/client.h"
#include "records/change.h"

namespace kiln::qualification::shell {

class BundleBuilder {
 public:
  virtual ~BundleBuilder() = default;
  virtual Result<Bundle> build(const std::vector<Change>& history, std::size_t index) = 0;
};

// Where a bundle's simulated stack lives: <bundle_dir>/<id>.stack.toml. The directory must be
// readable by the qualifier, which uploads it for each job (or by every agent, on a shared mount).
std::filesystem::path stack_effects_path(const std::filesystem::path& bundle_dir, const std::string& bundle_id);

// build_bundle_at, then the bundle's stack-effects file (sim_stack_effects_toml), written
// atomically.
std::unique_ptr<BundleBuilder> make_sim_builder(std::filesystem::path bundle_dir, SimBuilderOptions options);

// Runs config.program with the expanded args ({change}, {index}, {out} = a fresh folder under
// work_dir) under its timeout; its stdout must be the bundle as JSON (to_json's shape), whose
// id is checked against its content and whose changes must be history[0..index].
std::unique_ptr<BundleBuilder> make_command_builder(CommandBuilderConfig config, std::filesystem::path work_dir);

// The configured builder: `program` with `args` (the command builder, its work directory the
// bundle directory), else the sim builder for these revisions. `kiln bundle build` and the
// qualifier's bisection bundles use the same.
std::unique_ptr<BundleBuilder> make_configured_builder(const std::string& program, const std::vector<std::string>& args,
                                                       const std::filesystem::path& bundle_dir,
                                                       std::vector<std::string> revisions);

// The bundle of every recorded change up to `at_change` (empty: the latest), built by `builder`
// and recorded on the coordinator (recording it again is fine: a bundle is its content). What
// `kiln bundle build` does, and the qualifier before a scheduled nightly.
struct RecordedBundle {
  Bundle bundle;
  std::string at_change;  // its last change
};
Result<RecordedBundle> build_recorded_bundle(cli::Client& client, BundleBuilder& builder, const std::string& at_change);
// The same, from `history`, the recorded changes as the caller last read them.
Result<RecordedBundle> build_recorded_bundle(cli::Client& client, BundleBuilder& builder, const std::string& at_change,
                                             const std::vector<Change>& history);

}  // namespace kiln::qualification::shell
