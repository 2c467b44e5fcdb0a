#include "release/environments.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/toml_errors.h"

namespace kiln::release {

namespace {

constexpr std::string_view kRemedy = "fix the file (docs/releases.md shows each file)";

Error problem(std::string_view source, const toml::node& node, std::string_view what) {
  return Error{Errc::config, fmt::format("{}: {}; {}", config::where(source, node.source()), what, kRemedy)};
}
Error problem(std::string_view source, std::string_view what) {
  return Error{Errc::config, fmt::format("{}: {}; {}", source, what, kRemedy)};
}

// A string member: absent gives `fallback` (or an error when required), another type an error.
Result<std::string> string_of(const toml::table& table, std::string_view key, std::string_view source,
                              std::optional<std::string> fallback) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    if (fallback) return *fallback;
    return tl::unexpected(problem(source, fmt::format("'{}' is missing", key)));
  }
  if (!node->is_string()) return tl::unexpected(problem(source, *node, fmt::format("'{}' must be a string", key)));
  return node->as_string()->get();
}

Result<std::vector<std::string>> strings_of(const toml::table& table, std::string_view key, std::string_view source,
                                            std::vector<std::string> fallback) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  const toml::array* array = node->as_array();
  if (array == nullptr) return tl::unexpected(problem(source, *node, fmt::format("'{}' must be a list of strings", key)));
  std::vector<std::string> values;
  for (const toml::node& item : *array) {
    if (!item.is_string() || item.as_string()->get().empty()) {
      return tl::unexpected(problem(source, item, fmt::format("'{}' must be a list of non-empty strings", key)));
    }
    values.push_back(item.as_string()->get());
  }
  return values;
}

Result<double> number_of(const toml::table& table, std::string_view key, std::string_view source, double fallback,
                         double low, double high) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  std::optional<double> value = node->value<double>();
  if (!value || *value < low || *value > high) {
    return tl::unexpected(problem(source, *node, fmt::format("'{}' must be a number from {} to {}", key, low, high)));
  }
  return *value;
}

Result<int> count_of(const toml::table& table, std::string_view key, std::string_view source) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return 1;
  std::optional<std::int64_t> value = node->value<std::int64_t>();
  if (!node->is_integer() || !value || *value < 1 || *value > 65536) {
    return tl::unexpected(problem(source, *node, fmt::format("'{}' must be an integer from 1 to 65536", key)));
  }
  return static_cast<int>(*value);
}

bool is_sha256_digest(std::string_view digest) {
  constexpr std::string_view prefix = "sha256:";
  if (digest.substr(0, prefix.size()) != prefix || digest.size() != prefix.size() + 64) return false;
  return std::all_of(digest.begin() + prefix.size(), digest.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f'); });
}

bool is_bundle_id(std::string_view id) {
  return id.size() == 64 && std::all_of(id.begin(), id.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

const std::set<std::string_view> kGates = {"smoke", "nightly", "release"};

}  // namespace

std::string bundle_path(std::string_view bundle_id) { return fmt::format("bundles/{}.toml", bundle_id); }
std::string environment_path(std::string_view environment) { return fmt::format("environments/{}.toml", environment); }

std::string format_bundle_file(const BundleFile& bundle) {
  toml::table root;
  root.insert("id", bundle.id);
  toml::array revisions;
  for (const auto& revision : bundle.hardware_revisions) revisions.push_back(revision);
  root.insert("hardware_revisions", std::move(revisions));
  root.insert("model_configs_version", bundle.model_configs_version);
  if (!bundle.one_way_firmware.empty()) root.insert("one_way_firmware", bundle.one_way_firmware);
  toml::table layers;
  for (const auto& [name, pin] : bundle.layers) layers.insert(name, toml::table{{"version", pin.version}, {"digest", pin.digest}});
  root.insert("layers", std::move(layers));
  if (!bundle.models.empty()) {
    toml::array models;
    for (const ServingConfig& model : bundle.models) {
      models.push_back(toml::table{{"name", model.model},
                                   {"batch_size", model.batch_size},
                                   {"precision", model.precision},
                                   {"tensor_parallel", model.tensor_parallel},
                                   {"pipeline_parallel", model.pipeline_parallel},
                                   {"data_parallel", model.data_parallel}});
    }
    root.insert("model", std::move(models));
  }
  std::ostringstream out;
  out << toml::toml_formatter(root) << "\n";
  return out.str();
}

Result<BundleFile> parse_bundle_file(std::string_view text, std::string_view source) {
  auto root = config::parse_toml(text, source, kRemedy);
  if (!root) return tl::unexpected(root.error());
  if (auto ok = config::check_known_keys(source, *root, "a bundle file",
                                         {"id", "hardware_revisions", "model_configs_version", "one_way_firmware",
                                          "layers", "model"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  BundleFile bundle;
  auto id = string_of(*root, "id", source, std::nullopt);
  if (!id) return tl::unexpected(id.error());
  if (!is_bundle_id(*id)) {
    return tl::unexpected(problem(source, *root->get("id"), "'id' must be the bundle's full id (64 lowercase hex "
                                                            "digits, as `kiln bundle show` prints it)"));
  }
  bundle.id = *id;
  auto revisions = strings_of(*root, "hardware_revisions", source, {});
  if (!revisions) return tl::unexpected(revisions.error());
  if (revisions->empty()) return tl::unexpected(problem(source, "'hardware_revisions' must name at least one revision"));
  bundle.hardware_revisions = std::move(*revisions);
  auto configs = string_of(*root, "model_configs_version", source, std::string());
  if (!configs) return tl::unexpected(configs.error());
  bundle.model_configs_version = *configs;
  auto one_way = string_of(*root, "one_way_firmware", source, std::string());
  if (!one_way) return tl::unexpected(one_way.error());
  bundle.one_way_firmware = *one_way;

  const toml::table* layers = (*root)["layers"].as_table();
  if (layers == nullptr) return tl::unexpected(problem(source, "'[layers.<name>]' tables are missing"));
  std::vector<std::string_view> known(std::begin(kPinnedLayers), std::end(kPinnedLayers));
  if (auto ok = config::check_known_keys(source, *layers, "[layers]", known); !ok) return tl::unexpected(ok.error());
  for (std::string_view layer : kPinnedLayers) {
    const toml::table* pin = (*layers)[layer].as_table();
    if (pin == nullptr) return tl::unexpected(problem(source, fmt::format("[layers.{}] is missing", layer)));
    if (auto ok = config::check_known_keys(source, *pin, fmt::format("[layers.{}]", layer), {"version", "digest"}); !ok) {
      return tl::unexpected(ok.error());
    }
    auto version = string_of(*pin, "version", source, std::nullopt);
    if (!version) return tl::unexpected(version.error());
    auto digest = string_of(*pin, "digest", source, std::nullopt);
    if (!digest) return tl::unexpected(digest.error());
    if (!is_sha256_digest(*digest)) {
      return tl::unexpected(problem(source, *pin->get("digest"),
                                    fmt::format("[layers.{}] digest must be \"sha256:\" and 64 lowercase hex digits",
                                                layer)));
    }
    bundle.layers[std::string(layer)] = LayerPin{*version, *digest};
  }

  if (const toml::node* models = root->get("model")) {
    const toml::array* entries = models->as_array();
    if (entries == nullptr) return tl::unexpected(problem(source, *models, "'model' must be [[model]] tables"));
    std::set<std::string> seen;
    for (const toml::node& entry : *entries) {
      const toml::table* table = entry.as_table();
      if (table == nullptr) return tl::unexpected(problem(source, entry, "'model' must be [[model]] tables"));
      if (auto ok = config::check_known_keys(source, *table, "[[model]]",
                                             {"name", "batch_size", "precision", "tensor_parallel",
                                              "pipeline_parallel", "data_parallel"});
          !ok) {
        return tl::unexpected(ok.error());
      }
      ServingConfig config;
      auto name = string_of(*table, "name", source, std::nullopt);
      if (!name) return tl::unexpected(name.error());
      if (!seen.insert(*name).second) {
        return tl::unexpected(problem(source, entry, fmt::format("model '{}' is served twice; keep one [[model]]", *name)));
      }
      config.model = *name;
      auto precision = string_of(*table, "precision", source, std::nullopt);
      if (!precision) return tl::unexpected(precision.error());
      config.precision = *precision;
      for (auto [key, field] : {std::pair{"batch_size", &ServingConfig::batch_size},
                                std::pair{"tensor_parallel", &ServingConfig::tensor_parallel},
                                std::pair{"pipeline_parallel", &ServingConfig::pipeline_parallel},
                                std::pair{"data_parallel", &ServingConfig::data_parallel}}) {
        auto value = count_of(*table, key, source);
        if (!value) return tl::unexpected(value.error());
        config.*field = *value;
      }
      bundle.models.push_back(std::move(config));
    }
  }
  return bundle;
}

Result<EnvironmentFile> parse_environment_file(std::string_view text, std::string_view source, std::string name) {
  auto root = config::parse_toml(text, source, kRemedy);
  if (!root) return tl::unexpected(root.error());
  if (auto ok = config::check_known_keys(source, *root, "an environment file",
                                         {"bundle", "follows", "requires", "soak_hours", "nodes", "node_labels",
                                          "approver_roles", "eval_threshold", "eval_thresholds"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  EnvironmentFile env;
  env.name = std::move(name);
  auto bundle = string_of(*root, "bundle", source, std::nullopt);
  if (!bundle) return tl::unexpected(bundle.error());
  if (!bundle->empty() && !is_bundle_id(*bundle)) {
    return tl::unexpected(problem(source, *root->get("bundle"), "'bundle' must be a full bundle id or \"\" (none yet)"));
  }
  env.bundle = *bundle;
  auto follows = string_of(*root, "follows", source, std::string());
  if (!follows) return tl::unexpected(follows.error());
  env.follows = *follows;
  auto gates = strings_of(*root, "requires", source, {});
  if (!gates) return tl::unexpected(gates.error());
  for (const auto& gate : *gates) {
    if (!kGates.contains(gate)) {
      return tl::unexpected(problem(source, *root->get("requires"),
                                    fmt::format("'requires' names gate '{}'; the gates are the qualification tiers "
                                                "smoke, nightly and release",
                                                gate)));
    }
  }
  env.requires_gates = std::move(*gates);
  auto soak = number_of(*root, "soak_hours", source, 0, 0, 24 * 365);
  if (!soak) return tl::unexpected(soak.error());
  env.soak_hours = *soak;
  auto nodes = strings_of(*root, "nodes", source, {});
  if (!nodes) return tl::unexpected(nodes.error());
  env.nodes = std::move(*nodes);
  auto labels = strings_of(*root, "node_labels", source, {});
  if (!labels) return tl::unexpected(labels.error());
  env.node_labels = std::move(*labels);
  auto approvers = strings_of(*root, "approver_roles", source, env.approver_roles);
  if (!approvers) return tl::unexpected(approvers.error());
  env.approver_roles = std::move(*approvers);
  if (root->contains("eval_threshold")) {
    auto threshold = number_of(*root, "eval_threshold", source, 0, 0, 1);
    if (!threshold) return tl::unexpected(threshold.error());
    env.eval_threshold = *threshold;
  }
  if (const toml::node* per_model = root->get("eval_thresholds")) {
    const toml::table* table = per_model->as_table();
    if (table == nullptr) {
      return tl::unexpected(problem(source, *per_model, "'eval_thresholds' must be a table of model = share"));
    }
    for (const auto& [model, value] : *table) {
      std::optional<double> share = value.value<double>();
      if (!share || *share < 0 || *share > 1) {
        return tl::unexpected(problem(source, value, fmt::format("eval threshold of '{}' must be a share from 0 to 1",
                                                                 model.str())));
      }
      env.eval_thresholds[std::string(model.str())] = *share;
    }
  }
  return env;
}

Result<CompatibilityMatrix> parse_compatibility(std::string_view text, std::string_view source) {
  auto root = config::parse_toml(text, source, kRemedy);
  if (!root) return tl::unexpected(root.error());
  if (auto ok = config::check_known_keys(source, *root, "compatibility.toml", {"combination"}); !ok) {
    return tl::unexpected(ok.error());
  }
  CompatibilityMatrix matrix;
  const toml::node* node = root->get("combination");
  if (node == nullptr) return matrix;
  const toml::array* entries = node->as_array();
  if (entries == nullptr) return tl::unexpected(problem(source, *node, "'combination' must be [[combination]] tables"));
  for (const toml::node& entry : *entries) {
    const toml::table* table = entry.as_table();
    if (table == nullptr) return tl::unexpected(problem(source, entry, "'combination' must be [[combination]] tables"));
    if (auto ok = config::check_known_keys(source, *table, "[[combination]]",
                                           {"hardware_revision", "firmware", "driver", "runtime"});
        !ok) {
      return tl::unexpected(ok.error());
    }
    Combination combination;
    auto revision = string_of(*table, "hardware_revision", source, std::nullopt);
    if (!revision) return tl::unexpected(revision.error());
    combination.hardware_revision = *revision;
    for (auto [key, field] : {std::pair{"firmware", &Combination::firmware}, std::pair{"driver", &Combination::driver},
                              std::pair{"runtime", &Combination::runtime}}) {
      auto versions = strings_of(*table, key, source, {});
      if (!versions) return tl::unexpected(versions.error());
      if (versions->empty()) {
        return tl::unexpected(problem(source, entry, fmt::format("[[combination]] needs '{}' versions (\"*\" for any)",
                                                                 key)));
      }
      combination.*field = std::move(*versions);
    }
    matrix.combinations.push_back(std::move(combination));
  }
  return matrix;
}

Result<Snapshot> read_snapshot(const std::map<std::string, std::string>& files) {
  Snapshot snapshot;
  for (const auto& [path, text] : files) {
    const bool toml = path.size() > 5 && path.ends_with(".toml");
    if (toml && path.starts_with("bundles/") && path.find('/', 8) == std::string::npos) {
      auto bundle = parse_bundle_file(text, path);
      if (!bundle) return tl::unexpected(bundle.error());
      if (path != bundle_path(bundle->id)) {
        return fail(Errc::config, fmt::format("{}: the file of bundle {} must be {}; rename it", path, bundle->id,
                                              bundle_path(bundle->id)));
      }
      snapshot.bundles[bundle->id] = std::move(*bundle);
    } else if (toml && path.starts_with("environments/") && path.find('/', 13) == std::string::npos) {
      std::string name = path.substr(13, path.size() - 13 - 5);
      auto env = parse_environment_file(text, path, name);
      if (!env) return tl::unexpected(env.error());
      snapshot.environments[name] = std::move(*env);
    } else if (path == kCompatibilityPath) {
      auto matrix = parse_compatibility(text, path);
      if (!matrix) return tl::unexpected(matrix.error());
      snapshot.compatibility = std::move(*matrix);
    }
  }
  for (const auto& [name, env] : snapshot.environments) {
    if (!env.bundle.empty() && !snapshot.bundles.contains(env.bundle)) {
      return fail(Errc::config, fmt::format("{} runs bundle {}, but {} is missing; add the bundle's file",
                                            environment_path(name), env.bundle, bundle_path(env.bundle)));
    }
    if (!env.follows.empty() && !snapshot.environments.contains(env.follows)) {
      return fail(Errc::config, fmt::format("{} follows '{}', which has no {}; name an environment of the repository",
                                            environment_path(name), env.follows, environment_path(env.follows)));
    }
    // Following `follows` from any environment must end at one that follows none.
    std::set<std::string> visited = {name};
    for (std::string at = env.follows; !at.empty(); at = snapshot.environments.at(at).follows) {
      if (!visited.insert(at).second) {
        return fail(Errc::config, fmt::format("{}: 'follows' goes round in a circle through {}; one environment must "
                                              "follow none",
                                              environment_path(name), at));
      }
    }
  }
  return snapshot;
}

Result<std::string> with_bundle(std::string_view environment_text, std::string_view bundle_id) {
  std::string out;
  bool replaced = false;
  bool in_table = false;
  std::size_t start = 0;
  while (start < environment_text.size()) {
    std::size_t end = environment_text.find('\n', start);
    const std::size_t stop = end == std::string_view::npos ? environment_text.size() : end + 1;
    std::string_view line = environment_text.substr(start, stop - start);
    std::string_view trimmed = line.substr(std::min(line.find_first_not_of(" \t"), line.size()));
    if (trimmed.starts_with("[")) in_table = true;
    // Only a top-level `bundle` key is the environment's bundle (a table's key could be named so).
    std::string_view after_key = trimmed.starts_with("bundle") ? trimmed.substr(6) : std::string_view();
    after_key = after_key.substr(std::min(after_key.find_first_not_of(" \t"), after_key.size()));
    if (!in_table && !replaced && after_key.starts_with("=")) {
      out += fmt::format("bundle = \"{}\"\n", bundle_id);
      replaced = true;
    } else {
      out += line;
    }
    start = stop;
  }
  if (!replaced) {
    return fail(Errc::config, "the environment file has no top-level `bundle = \"...\"` line; add one before any table");
  }
  return out;
}

bool version_allowed(const std::vector<std::string>& allowed, std::string_view version) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& pattern) {
    if (pattern.ends_with('*')) return version.starts_with(std::string_view(pattern).substr(0, pattern.size() - 1));
    return pattern == version;
  });
}

std::vector<std::string> compatibility_problems(const CompatibilityMatrix& matrix, const BundleFile& bundle) {
  std::vector<std::string> problems;
  const std::string& firmware = bundle.layers.at("firmware").version;
  const std::string& driver = bundle.layers.at("driver").version;
  const std::string& runtime = bundle.layers.at("runtime").version;
  for (const auto& revision : bundle.hardware_revisions) {
    const bool allowed = std::any_of(matrix.combinations.begin(), matrix.combinations.end(), [&](const Combination& c) {
      return c.hardware_revision == revision && version_allowed(c.firmware, firmware) &&
             version_allowed(c.driver, driver) && version_allowed(c.runtime, runtime);
    });
    if (!allowed) {
      problems.push_back(fmt::format("on hardware revision {}, no [[combination]] of {} allows firmware {} with "
                                     "driver {} and runtime {}",
                                     revision, kCompatibilityPath, firmware, driver, runtime));
    }
  }
  return problems;
}

std::map<std::string, DesiredEnvironment> desired_state(const Snapshot& snapshot) {
  std::map<std::string, DesiredEnvironment> desired;
  for (const auto& [name, env] : snapshot.environments) {
    DesiredEnvironment entry{name, std::nullopt, env.nodes, env.node_labels};
    if (!env.bundle.empty()) entry.bundle = snapshot.bundles.at(env.bundle);
    desired.emplace(name, std::move(entry));
  }
  return desired;
}

}  // namespace kiln::release
