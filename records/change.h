// Changes and bundles: what the coordinator knows about the software stack under test.
//
// A change is one merged commit in one layer of the stack. A bundle is a built stack: one
// version per layer, the model configs, the hardware revisions it supports and the ordered
// changes it contains. A bundle's id is the SHA-256 of its canonical serialization, so the same
// content always gets the same id and any result that names a bundle can be rebuilt and rerun.
// Pure: no files, no clocks (merge times are passed in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::qualification {

// The layers of the stack, from the model down to the chip's firmware.
enum class Layer { model, framework, compiler, kernels, runtime, driver, firmware };
constexpr EnumTable<Layer, 7> enum_names(Layer) {
  return {{
      {Layer::model, "model"},
      {Layer::framework, "framework"},
      {Layer::compiler, "compiler"},
      {Layer::kernels, "kernels"},
      {Layer::runtime, "runtime"},
      {Layer::driver, "driver"},
      {Layer::firmware, "firmware"},
  }};
}
inline constexpr auto kAllLayers = enum_values<Layer>();
inline std::string_view to_string(Layer value) { return enum_name(value); }
inline std::optional<Layer> layer_from_string(std::string_view name) { return enum_from_name<Layer>(name); }

// Layers whose changes run on the accelerator (they get a presubmit smoke on every revision).
bool is_hardware_path(Layer layer);

// What a change does to the simulated stack (the sim builder and the demo only): it feeds the
// stack-effects file the sim workloads read (docs/workloads.md). Registry model names and
// kernel names, as that file requires.
struct SimChangeEffect {
  std::map<std::string, double> throughput_factors;  // model -> factor, multiplied in
  std::set<std::string> breaks_kernels;              // these kernels' numerics become broken
  std::set<std::string> repairs_kernels;             // ... or fixed again (a revert)
};

struct Change {
  std::string id;                       // "c0412" or a commit hash; unique in a history
  Layer layer = Layer::kernels;
  std::string owner_team;               // who gets the ticket
  std::vector<std::string> components;  // what it touched: kernels, or model names for a model change
  TimeMs merged_at_ms = 0;
  std::string summary;
  std::optional<SimChangeEffect> sim_effect;  // sim only; not part of any bundle's identity
};

Status validate(const Change& change);

// The stored form of a change (the coordinator's change records), sim effect included.
nlohmann::json to_json(const Change& change);
Result<Change> change_from_json(const nlohmann::json& json);  // validates

// A history of changes in merge order, from TOML (`kiln change import`):
//
//   [[change]]
//   id = "c0412"
//   layer = "kernels"                 # model framework compiler kernels runtime driver firmware
//   owner_team = "kernels-team"
//   components = ["gemm-bf16"]
//   merged_at_ms = 1796013552000      # optional: default `first_merged_at_ms` + 1 min per entry
//   summary = "faster bf16 tiles"     # optional
//   [change.sim_effect]               # optional, sim only
//   throughput = { "mlp-bf16" = 0.97 }
//   breaks_kernels = ["gemm-bf16"]
//   repairs_kernels = []
//
// Ids must be unique and merge times must not go backwards. Errors carry file:line:col.
Result<std::vector<Change>> parse_change_history(std::string_view toml_text, std::string_view source,
                                                 TimeMs first_merged_at_ms);

// One version per layer that ships in a bundle. Model changes are versioned as the model
// configs (Bundle::model_configs_version).
struct LayerVersions {
  std::string framework;
  std::string compiler;
  std::string kernels;
  std::string runtime;
  std::string driver;
  std::string firmware;

  // nullptr for Layer::model (see Bundle::model_configs_version).
  const std::string* find(Layer layer) const;
  std::string* find(Layer layer);
};

// A bundle is the stack at one point of the change history: it contains the history's first
// change_count changes, the last of them last_change. Change ids are unique and the history only
// grows, so the pair names that prefix, and a bundle stays the same size however long the
// history gets (kiln.bundle/2). Bundles recorded before (kiln.bundle/1) listed every change;
// they are still read, and their list is kept because their id hashes it.
struct Bundle {
  std::string id;  // lowercase hex SHA-256 of canonical_serialization(); see seal()
  LayerVersions versions;
  std::string model_configs_version;
  std::vector<std::string> hardware_revisions;  // "a", "b"; kept sorted, without duplicates
  std::size_t change_count = 0;
  std::string last_change;  // empty only when change_count is 0
  std::optional<std::vector<std::string>> listed_change_ids;  // a kiln.bundle/1 record's changes
};

// The bytes the id hashes: compact JSON with sorted keys and sorted revisions. The id itself is
// not part of it. A kiln.bundle/1 bundle keeps its own form (its changes, in order).
std::string canonical_serialization(const Bundle& bundle);

// Lowercase hex SHA-256 of `bytes` (OpenSSL EVP). Also used for config hashes.
std::string sha256_hex(std::string_view bytes);

// Sorts and dedupes the revisions and sets the id from the content (and a kiln.bundle/1 bundle's
// change_count and last_change from its list).
Bundle seal(Bundle bundle);

// Fails when the id is not the hash of the content (a tampered or stale record).
Status verify_id(const Bundle& bundle);

nlohmann::json to_json(const Bundle& bundle);
Result<Bundle> bundle_from_json(const nlohmann::json& json);  // checks the id (verify_id)

struct SimBuilderOptions {
  std::vector<std::string> hardware_revisions = {"a", "b"};
  std::string base_version = "base";  // a layer's version before any change of that layer
};

// The sim builder: the bundle containing changes [0, index] of `history` (merge order). A
// layer's version is "<base>" with no change of that layer in the prefix, otherwise
// "r<count>-<id of its last change>", so each change yields a distinct, readable bundle. Fails
// on an index past the end, a duplicate change id or an invalid change.
Result<Bundle> build_bundle_at(const std::vector<Change>& history, std::size_t index,
                               const SimBuilderOptions& options);
Result<Bundle> build_bundle_at(const std::vector<Change>& history, std::size_t index);

// The bundle's changes in `history` (merge order): its first change_count entries. Fails when the
// history is shorter or holds another change at the bundle's last position (a bundle of another
// history), or when a kiln.bundle/1 bundle's list differs from that prefix.
Result<std::span<const Change>> bundle_changes(std::span<const Change> history, const Bundle& bundle);

// The changes `bad` adds on top of `good`, in order: the bisection candidates. Both must be
// bundles of `history` (bundle_changes), and `bad` must add at least one change.
Result<std::vector<std::string>> changes_between(std::span<const Change> history, const Bundle& good,
                                                 const Bundle& bad);

// The stack-effects TOML (docs/workloads.md, KILN_SIM_STACK_EFFECTS) that simulates the bundle
// containing changes [0, index]: throughput factors multiplied over the changes, kernels broken
// by one change and not repaired by a later one. Model and kernel names are the changes' own;
// the workload refuses names not in its registry.
Result<std::string> sim_stack_effects_toml(const std::vector<Change>& history, std::size_t index);

// The kernels broken after `changes` (a bundle's, in merge order): broken by one change and not
// repaired by a later one. The stack-effects file's [numerics] kernels, and the unit tier's
// broken_kernels driver option.
std::set<std::string> sim_broken_kernels(std::span<const Change> changes);

// A builder that runs a configured program (shell/bundle_builder.h runs it; this is its
// description).
// The args may hold placeholders the shell expands with expand_command: {change} (the id of the
// last change to include), {index} (its position in the history), {out} (the output directory).
// The program must print the built bundle as JSON (to_json's shape, kiln.bundle/2) on stdout.
struct CommandBuilderConfig {
  std::string program;                // absolute path, run by argv, never through a shell
  std::vector<std::string> args;
  std::map<std::string, std::string> environment;  // added to the builder's environment
  DurationMs timeout_ms = 60 * kMinuteMs;
  std::size_t max_output_bytes = 1u << 20;
};

Status validate(const CommandBuilderConfig& config);

// The argv (program first) with the placeholders replaced.
std::vector<std::string> expand_command(const CommandBuilderConfig& config, std::string_view change_id,
                                        std::size_t index, std::string_view out_dir);

// What every result records so it can be rerun and bisected (DESIGN.md principle 3).
struct RunAttribution {
  std::string bundle_id;
  std::string node_id;
  std::vector<int> chips;
  std::string hardware_revision;
  std::uint64_t seed = 0;
  std::string config_hash;  // sha256_hex of the job's canonical config
};

nlohmann::json to_json(const RunAttribution& attribution);

}  // namespace kiln::qualification
