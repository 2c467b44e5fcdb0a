#include "records/change.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include "records/toml_text.h"

namespace kiln::qualification {

bool is_hardware_path(Layer layer) {
  return layer != Layer::model && layer != Layer::framework;
}

Status validate(const Change& change) {
  if (change.id.empty()) return fail(Errc::invalid_argument, "a change has an empty id; give every change its id");
  if (change.owner_team.empty()) {
    return fail(Errc::invalid_argument,
                fmt::format("change {} has no owner_team; every change needs a team to send tickets to", change.id));
  }
  if (change.sim_effect) {
    for (const auto& [model, factor] : change.sim_effect->throughput_factors) {
      if (!(factor > 0.0 && factor <= 10.0)) {
        return fail(Errc::invalid_argument,
                    fmt::format("change {}: throughput factor {} for '{}' is outside (0, 10]", change.id, factor, model));
      }
    }
  }
  return {};
}

const std::string* LayerVersions::find(Layer layer) const {
  switch (layer) {
    case Layer::model: return nullptr;
    case Layer::framework: return &framework;
    case Layer::compiler: return &compiler;
    case Layer::kernels: return &kernels;
    case Layer::runtime: return &runtime;
    case Layer::driver: return &driver;
    case Layer::firmware: return &firmware;
  }
  return nullptr;
}

std::string* LayerVersions::find(Layer layer) {
  return const_cast<std::string*>(std::as_const(*this).find(layer));
}

namespace {

nlohmann::json versions_to_json(const LayerVersions& versions) {
  nlohmann::json json = nlohmann::json::object();
  for (Layer layer : kAllLayers) {
    if (const std::string* version = versions.find(layer)) json[std::string(to_string(layer))] = *version;
  }
  return json;
}

std::vector<std::string> sorted_unique(std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

constexpr std::string_view kBundleSchema = "kiln.bundle/2";
constexpr std::string_view kListingBundleSchema = "kiln.bundle/1";

nlohmann::json content_to_json(const Bundle& bundle) {
  // nlohmann::json objects keep their keys sorted, so dump() is canonical for this shape.
  nlohmann::json json = {{"versions", versions_to_json(bundle.versions)},
                         {"model_configs", bundle.model_configs_version},
                         {"hardware_revisions", sorted_unique(bundle.hardware_revisions)}};
  if (bundle.listed_change_ids) {
    json["schema"] = kListingBundleSchema;
    json["changes"] = *bundle.listed_change_ids;
  } else {
    json["schema"] = kBundleSchema;
    json["change_count"] = bundle.change_count;
    json["last_change"] = bundle.last_change;
  }
  return json;
}

struct DigestDeleter {
  void operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::unique_ptr<EVP_MD_CTX, DigestDeleter> context(EVP_MD_CTX_new());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  // Failing here means libcrypto itself is broken (allocation, no SHA-256): nothing a caller
  // could handle, and a wrong id would silently mix bundles up.
  const bool ok = context && EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(context.get(), bytes.data(), bytes.size()) == 1 &&
                  EVP_DigestFinal_ex(context.get(), digest, &digest_size) == 1;
  KILN_ASSERT(ok, "OpenSSL could not compute a SHA-256 digest");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(digest_size * 2);
  for (unsigned int i = 0; i < digest_size; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0x0f]);
  }
  return hex;
}

std::string canonical_serialization(const Bundle& bundle) { return content_to_json(bundle).dump(); }

Bundle seal(Bundle bundle) {
  bundle.hardware_revisions = sorted_unique(std::move(bundle.hardware_revisions));
  if (const auto& listed = bundle.listed_change_ids) {
    bundle.change_count = listed->size();
    bundle.last_change = listed->empty() ? std::string() : listed->back();
  }
  bundle.id = sha256_hex(canonical_serialization(bundle));
  return bundle;
}

Status verify_id(const Bundle& bundle) {
  const std::string expected = sha256_hex(canonical_serialization(bundle));
  if (bundle.id != expected) {
    return fail(Errc::integrity, fmt::format("bundle id {} does not match its content (hash {}); the record was "
                                             "changed after it was built: rebuild the bundle",
                                             bundle.id, expected));
  }
  return {};
}

nlohmann::json to_json(const Bundle& bundle) {
  nlohmann::json json = content_to_json(bundle);
  json["id"] = bundle.id;
  return json;
}

Result<Bundle> bundle_from_json(const nlohmann::json& json) {
  try {
    if (!json.is_object()) return fail(Errc::bad_message, "a bundle must be a JSON object");
    const std::string schema = json.value("schema", "");
    if (schema != kBundleSchema && schema != kListingBundleSchema) {
      return fail(Errc::bad_message, fmt::format("a bundle's schema must be \"{}\" (or \"{}\" for one recorded "
                                                 "before), not \"{}\"; rebuild it with this kiln",
                                                 kBundleSchema, kListingBundleSchema, schema));
    }
    Bundle bundle;
    bundle.id = json.at("id").get<std::string>();
    const auto& versions = json.at("versions");
    for (Layer layer : kAllLayers) {
      if (std::string* version = bundle.versions.find(layer)) {
        *version = versions.at(std::string(to_string(layer))).get<std::string>();
      }
    }
    bundle.model_configs_version = json.at("model_configs").get<std::string>();
    bundle.hardware_revisions = json.at("hardware_revisions").get<std::vector<std::string>>();
    if (schema == kListingBundleSchema) {
      auto& listed = bundle.listed_change_ids.emplace(json.at("changes").get<std::vector<std::string>>());
      bundle.change_count = listed.size();
      if (!listed.empty()) bundle.last_change = listed.back();
    } else {
      bundle.change_count = json.at("change_count").get<std::size_t>();
      bundle.last_change = json.at("last_change").get<std::string>();
      if ((bundle.change_count == 0) != bundle.last_change.empty()) {
        return fail(Errc::bad_message, fmt::format("bundle {} has {} changes and last change \"{}\"; a bundle with "
                                                   "changes names its last, one without names none: rebuild it",
                                                   bundle.id, bundle.change_count, bundle.last_change));
      }
    }
    if (auto ok = verify_id(bundle); !ok) return tl::unexpected(ok.error());
    return bundle;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("a bundle record is malformed ({}); rebuild the bundle", error.what()));
  }
}

namespace {

Status validate_history_prefix(const std::vector<Change>& history, std::size_t index) {
  if (index >= history.size()) {
    return fail(Errc::invalid_argument, fmt::format("change index {} is past the end of a history of {} changes",
                                                    index, history.size()));
  }
  std::set<std::string> seen;
  for (std::size_t i = 0; i <= index; ++i) {
    if (auto ok = validate(history[i]); !ok) return ok;
    if (!seen.insert(history[i].id).second) {
      return fail(Errc::invalid_argument,
                  fmt::format("change id {} appears twice in the history; change ids must be unique", history[i].id));
    }
  }
  return {};
}

}  // namespace

Result<Bundle> build_bundle_at(const std::vector<Change>& history, std::size_t index,
                               const SimBuilderOptions& options) {
  if (auto ok = validate_history_prefix(history, index); !ok) return tl::unexpected(ok.error());
  if (options.hardware_revisions.empty()) {
    return fail(Errc::invalid_argument, "the sim builder needs at least one hardware revision");
  }
  std::map<Layer, std::size_t> counts;
  std::map<Layer, std::string> last_change;
  Bundle bundle;
  for (std::size_t i = 0; i <= index; ++i) {
    const Change& change = history[i];
    ++counts[change.layer];
    last_change[change.layer] = change.id;
  }
  bundle.change_count = index + 1;
  bundle.last_change = history[index].id;
  auto version_of = [&](Layer layer) {
    auto it = counts.find(layer);
    return it == counts.end() ? options.base_version : fmt::format("r{}-{}", it->second, last_change[layer]);
  };
  for (Layer layer : kAllLayers) {
    if (std::string* version = bundle.versions.find(layer)) *version = version_of(layer);
  }
  bundle.model_configs_version = version_of(Layer::model);
  bundle.hardware_revisions = options.hardware_revisions;
  return seal(std::move(bundle));
}

Result<Bundle> build_bundle_at(const std::vector<Change>& history, std::size_t index) {
  return build_bundle_at(history, index, SimBuilderOptions{});
}

Result<std::span<const Change>> bundle_changes(std::span<const Change> history, const Bundle& bundle) {
  const std::size_t count = bundle.change_count;
  if (count > history.size() || (count > 0 && history[count - 1].id != bundle.last_change)) {
    const std::string found = count > history.size() ? fmt::format("has only {} changes", history.size())
                                                     : fmt::format("has change {} there", history[count - 1].id);
    return fail(Errc::not_found, fmt::format("bundle {} ends with change {} as change {} of its history, but the "
                                             "history {}; import the change history the bundle was built from "
                                             "(kiln change import)",
                                             bundle.id.substr(0, 12), bundle.last_change, count, found));
  }
  const auto changes = history.first(count);
  if (bundle.listed_change_ids &&
      !std::equal(changes.begin(), changes.end(), bundle.listed_change_ids->begin(), bundle.listed_change_ids->end(),
                  [](const Change& change, const std::string& id) { return change.id == id; })) {
    return fail(Errc::invalid_argument, fmt::format("bundle {} lists changes that are not the first {} of the history; "
                                                    "rebuild it from this history (kiln bundle build)",
                                                    bundle.id.substr(0, 12), count));
  }
  return changes;
}

Result<std::vector<std::string>> changes_between(std::span<const Change> history, const Bundle& good,
                                                 const Bundle& bad) {
  auto before = bundle_changes(history, good);
  if (!before) return tl::unexpected(before.error());
  auto after = bundle_changes(history, bad);
  if (!after) return tl::unexpected(after.error());
  if (before->size() > after->size()) {
    return fail(Errc::invalid_argument,
                fmt::format("bundle {} is not an ancestor of bundle {}: it contains {} changes, the other {}; bisect "
                            "from the older bundle",
                            good.id, bad.id, before->size(), after->size()));
  }
  if (before->size() == after->size()) {
    return fail(Errc::invalid_argument,
                fmt::format("bundles {} and {} contain the same changes; there is nothing to bisect", good.id, bad.id));
  }
  std::vector<std::string> added;
  for (const Change& change : after->subspan(before->size())) added.push_back(change.id);
  return added;
}

std::set<std::string> sim_broken_kernels(std::span<const Change> changes) {
  std::set<std::string> broken;
  for (const Change& change : changes) {
    if (!change.sim_effect) continue;
    for (const auto& kernel : change.sim_effect->repairs_kernels) broken.erase(kernel);
    for (const auto& kernel : change.sim_effect->breaks_kernels) broken.insert(kernel);
  }
  return broken;
}

Result<std::string> sim_stack_effects_toml(const std::vector<Change>& history, std::size_t index) {
  if (auto ok = validate_history_prefix(history, index); !ok) return tl::unexpected(ok.error());
  std::map<std::string, double> factors;
  for (std::size_t i = 0; i <= index; ++i) {
    if (!history[i].sim_effect) continue;
    const SimChangeEffect& effect = *history[i].sim_effect;
    for (const auto& [model, factor] : effect.throughput_factors) {
      auto [it, inserted] = factors.emplace(model, factor);
      if (!inserted) it->second *= factor;
    }
  }
  const std::set<std::string> broken =
      sim_broken_kernels(std::span<const Change>(history.data(), index + 1));
  std::ostringstream out;
  out << "# generated by kiln qualification for the bundle at change " << detail::toml_quote(history[index].id) << "\n";
  out << "[throughput]\ndefault = 1.0\n";
  for (const auto& [model, factor] : factors) {
    // Clamped into the range the workload accepts: many slowdowns multiplied can underflow it.
    out << detail::toml_quote(model) << " = " << detail::toml_float(std::clamp(factor, 1e-9, 10.0)) << "\n";
  }
  out << "\n[numerics]\nkernels = [";
  bool first = true;
  for (const auto& kernel : broken) {
    out << (first ? "" : ", ") << detail::toml_quote(kernel);
    first = false;
  }
  out << "]\n";
  return out.str();
}

Status validate(const CommandBuilderConfig& config) {
  if (config.program.empty() || config.program.front() != '/') {
    return fail(Errc::config, fmt::format("the bundle builder's program '{}' must be an absolute path", config.program));
  }
  if (config.timeout_ms <= 0) {
    return fail(Errc::config, "the bundle builder's timeout_ms must be positive");
  }
  if (config.max_output_bytes == 0) {
    return fail(Errc::config, "the bundle builder's max_output_bytes must be positive");
  }
  return {};
}

namespace {

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace

std::vector<std::string> expand_command(const CommandBuilderConfig& config, std::string_view change_id,
                                        std::size_t index, std::string_view out_dir) {
  std::vector<std::string> argv = {config.program};
  const std::string index_text = std::to_string(index);
  for (std::string arg : config.args) {
    replace_all(arg, "{change}", change_id);
    replace_all(arg, "{index}", index_text);
    replace_all(arg, "{out}", out_dir);
    argv.push_back(std::move(arg));
  }
  return argv;
}

nlohmann::json to_json(const RunAttribution& attribution) {
  return {{"bundle", attribution.bundle_id}, {"node", attribution.node_id},
          {"chips", attribution.chips},      {"revision", attribution.hardware_revision},
          {"seed", attribution.seed},        {"config_hash", attribution.config_hash}};
}

}  // namespace kiln::qualification
