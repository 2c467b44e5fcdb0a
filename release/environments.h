// The environments repository as data: what a release is (bundles/<id>.toml), what each
// environment runs and what it takes to get there (environments/<name>.toml), and which layer
// versions go together on which hardware (compatibility.toml). docs/releases.md has the layout
// with examples. Pure: the shell hands in the files' text, so the same functions read a working
// clone, a commit of history or a test's strings.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace kiln::release {

// One shipped layer of a bundle: its version and the digest of its package, "sha256:<64 hex>".
struct LayerPin {
  std::string version;
  std::string digest;
};

// The layers a bundle pins, in the order docs/releases.md lists them.
inline constexpr std::string_view kPinnedLayers[] = {"framework", "compiler", "kernels", "runtime", "driver",
                                                     "firmware"};

// How one model is served with the bundle.
struct ServingConfig {
  std::string model;
  int batch_size = 1;
  std::string precision;  // "bf16", "fp8-e4m3", ...
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
};

struct BundleFile {
  std::string id;  // the coordinator's bundle id (full SHA-256 hex); also the file's name
  std::map<std::string, LayerPin> layers;  // every name of kPinnedLayers
  std::string model_configs_version;
  std::vector<std::string> hardware_revisions;
  std::vector<ServingConfig> models;
  // Why this bundle's firmware cannot be taken back (a one-way fuse, a minimum firmware version
  // it raises); empty: it can. Promoting such a bundle needs a recorded override, and no
  // rollback goes past it.
  std::string one_way_firmware;
};

// What an environment runs, where, and what a bundle needs before it may come here.
struct EnvironmentFile {
  std::string name;                     // the file's stem: dev, staging, production
  std::string bundle;                   // the bundle it runs; empty: none yet
  std::string follows;                  // a bundle comes here from this environment; empty: from CI
  std::vector<std::string> requires_gates;  // qualification tiers a bundle must have passed: smoke, nightly, release
  double soak_hours = 0;                // how long a bundle must have run in `follows` first
  std::vector<std::string> nodes;       // the node set that belongs to it
  std::vector<std::string> node_labels; // or the labels that select them
  std::vector<std::string> approver_roles = {"ops", "admin"};  // who may approve a promotion here
  std::optional<double> eval_threshold;          // set: every served model's eval must reach it
  std::map<std::string, double> eval_thresholds; // per model, over eval_threshold
};

// One allowed stack on one hardware revision: a version list per layer ("*" any; "x*" a prefix).
struct Combination {
  std::string hardware_revision;
  std::vector<std::string> firmware;
  std::vector<std::string> driver;
  std::vector<std::string> runtime;
};

struct CompatibilityMatrix {
  std::vector<Combination> combinations;
};

// A whole repository at one commit.
struct Snapshot {
  std::map<std::string, BundleFile> bundles;            // by id
  std::map<std::string, EnvironmentFile> environments;  // by name
  CompatibilityMatrix compatibility;
};

// The paths the files live at.
std::string bundle_path(std::string_view bundle_id);
std::string environment_path(std::string_view environment);
inline constexpr std::string_view kCompatibilityPath = "compatibility.toml";

// Each parser refuses unknown keys, wrong types and bad values as Errc::config with
// "source:line:column" and what to write instead.
Result<BundleFile> parse_bundle_file(std::string_view text, std::string_view source);
Result<EnvironmentFile> parse_environment_file(std::string_view text, std::string_view source, std::string name);
Result<CompatibilityMatrix> parse_compatibility(std::string_view text, std::string_view source);

// Reads every bundles/*.toml, environments/*.toml and compatibility.toml of `files` (path in the
// repository -> text; other paths are ignored) and checks them together: a bundle file named
// after its id, every environment's bundle present, `follows` naming an environment, no cycle.
Result<Snapshot> read_snapshot(const std::map<std::string, std::string>& files);

// A bundle file's text, as parse_bundle_file reads it back (`kiln release add-bundle` writes it).
std::string format_bundle_file(const BundleFile& bundle);

// The environment file's text with its `bundle` set to `bundle_id`, the rest (comments included)
// untouched. The file must have a top-level `bundle = "..."` line (as read_snapshot's files do).
Result<std::string> with_bundle(std::string_view environment_text, std::string_view bundle_id);

// Whether `version` is in `allowed` ("*" is any version, "x*" any version starting with x).
bool version_allowed(const std::vector<std::string>& allowed, std::string_view version);

// Why the matrix does not allow the bundle's firmware x driver x runtime on each revision it
// supports; empty when it does.
std::vector<std::string> compatibility_problems(const CompatibilityMatrix& matrix, const BundleFile& bundle);

// What each environment should run, for whoever converges nodes on it (agents, docs/releases.md):
// the environment's bundle with its pins and serving configs, and its nodes or labels.
struct DesiredEnvironment {
  std::string name;
  std::optional<BundleFile> bundle;  // none: nothing promoted yet
  std::vector<std::string> nodes;
  std::vector<std::string> node_labels;
};
std::map<std::string, DesiredEnvironment> desired_state(const Snapshot& snapshot);

}  // namespace kiln::release
