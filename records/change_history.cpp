// Changes as records (JSON) and as a history file (TOML).
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "records/change.h"
#include "common/config/toml_errors.h"

namespace kiln::qualification {

nlohmann::json to_json(const Change& change) {
  nlohmann::json json = {{"schema", "kiln.change/1"},
                         {"id", change.id},
                         {"layer", to_string(change.layer)},
                         {"owner_team", change.owner_team},
                         {"components", change.components},
                         {"merged_at_ms", change.merged_at_ms},
                         {"summary", change.summary}};
  if (change.sim_effect) {
    json["sim_effect"] = {{"throughput", change.sim_effect->throughput_factors},
                          {"breaks_kernels", change.sim_effect->breaks_kernels},
                          {"repairs_kernels", change.sim_effect->repairs_kernels}};
  }
  return json;
}

Result<Change> change_from_json(const nlohmann::json& json) {
  try {
    if (!json.is_object() || json.value("schema", "") != "kiln.change/1") {
      return fail(Errc::bad_message, "a change record must be a JSON object with schema \"kiln.change/1\"");
    }
    Change change;
    change.id = json.at("id").get<std::string>();
    const std::string layer = json.at("layer").get<std::string>();
    const auto parsed = layer_from_string(layer);
    if (!parsed) {
      return fail(Errc::bad_message, fmt::format("change {}: unknown layer '{}'; layers are model, framework, "
                                                 "compiler, kernels, runtime, driver, firmware",
                                                 change.id, layer));
    }
    change.layer = *parsed;
    change.owner_team = json.at("owner_team").get<std::string>();
    change.components = json.at("components").get<std::vector<std::string>>();
    change.merged_at_ms = json.at("merged_at_ms").get<TimeMs>();
    change.summary = json.value("summary", "");
    if (const auto effect = json.find("sim_effect"); effect != json.end()) {
      SimChangeEffect sim;
      sim.throughput_factors = effect->value("throughput", std::map<std::string, double>{});
      sim.breaks_kernels = effect->value("breaks_kernels", std::set<std::string>{});
      sim.repairs_kernels = effect->value("repairs_kernels", std::set<std::string>{});
      change.sim_effect = std::move(sim);
    }
    if (auto ok = validate(change); !ok) return tl::unexpected(ok.error());
    return change;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("a change record is malformed ({}); record the change again", error.what()));
  }
}

namespace {

using config::where;

Result<std::vector<std::string>> string_array(const toml::table& table, std::string_view key, std::string_view at) {
  std::vector<std::string> out;
  const toml::node* node = table.get(key);
  if (node == nullptr) return out;
  const toml::array* array = node->as_array();
  if (array == nullptr) return fail(Errc::config, fmt::format("{}: {} must be an array of strings", at, key));
  for (const auto& item : *array) {
    const auto text = item.value<std::string>();
    if (!text || text->empty()) {
      return fail(Errc::config, fmt::format("{}: every entry of {} must be a non-empty string", at, key));
    }
    out.push_back(*text);
  }
  return out;
}

Result<SimChangeEffect> parse_sim_effect(const toml::table& table, std::string_view source) {
  if (auto ok = config::check_known_keys(source, table, "[change.sim_effect]",
                                         {"throughput", "breaks_kernels", "repairs_kernels"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const std::string at = where(source, table.source());
  SimChangeEffect effect;
  if (const toml::node* throughput = table.get("throughput")) {
    const toml::table* factors = throughput->as_table();
    if (factors == nullptr) {
      return fail(Errc::config, fmt::format("{}: throughput must be a table of model = factor", at));
    }
    for (const auto& [model, factor] : *factors) {
      const auto value = factor.value<double>();
      if (!value) {
        return fail(Errc::config, fmt::format("{}: throughput factor of '{}' must be a number such as 0.97",
                                              where(source, factor.source()), model.str()));
      }
      effect.throughput_factors[std::string(model.str())] = *value;
    }
  }
  auto breaks = string_array(table, "breaks_kernels", at);
  if (!breaks) return tl::unexpected(breaks.error());
  effect.breaks_kernels.insert(breaks->begin(), breaks->end());
  auto repairs = string_array(table, "repairs_kernels", at);
  if (!repairs) return tl::unexpected(repairs.error());
  effect.repairs_kernels.insert(repairs->begin(), repairs->end());
  return effect;
}

Result<Change> parse_change(const toml::table& table, std::string_view source, TimeMs default_merged_at_ms) {
  if (auto ok = config::check_known_keys(
          source, table, "[[change]]",
          {"id", "layer", "owner_team", "components", "merged_at_ms", "summary", "sim_effect"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const std::string at = where(source, table.source());
  Change change;
  const auto id = table["id"].value<std::string>();
  const auto layer = table["layer"].value<std::string>();
  const auto owner = table["owner_team"].value<std::string>();
  if (!id || !layer || !owner) {
    return fail(Errc::config, fmt::format("{}: [[change]] needs id, layer and owner_team as strings", at));
  }
  change.id = *id;
  const auto parsed = layer_from_string(*layer);
  if (!parsed) {
    return fail(Errc::config, fmt::format("{}: change {}: layer '{}' must be one of model, framework, compiler, "
                                          "kernels, runtime, driver, firmware",
                                          at, change.id, *layer));
  }
  change.layer = *parsed;
  change.owner_team = *owner;
  auto components = string_array(table, "components", at);
  if (!components) return tl::unexpected(components.error());
  change.components = std::move(*components);
  change.merged_at_ms = table["merged_at_ms"].value_exact<std::int64_t>().value_or(default_merged_at_ms);
  change.summary = table["summary"].value<std::string>().value_or("");
  if (const toml::node* effect = table.get("sim_effect")) {
    const toml::table* effect_table = effect->as_table();
    if (effect_table == nullptr) return fail(Errc::config, fmt::format("{}: sim_effect must be a table", at));
    auto sim = parse_sim_effect(*effect_table, source);
    if (!sim) return tl::unexpected(sim.error());
    change.sim_effect = std::move(*sim);
  }
  if (auto ok = validate(change); !ok) return fail(ok.error().code, fmt::format("{}: {}", at, ok.error().message));
  return change;
}

}  // namespace

Result<std::vector<Change>> parse_change_history(std::string_view toml_text, std::string_view source,
                                                 TimeMs first_merged_at_ms) {
  auto parsed = config::parse_toml(toml_text, source, "fix the change history file");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& root = *parsed;
  if (auto ok = config::check_known_keys(source, root, "the change history (it holds [[change]] tables)", {"change"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const toml::array* entries = root["change"].as_array();
  if (entries == nullptr || entries->empty()) {
    return fail(Errc::config, fmt::format("{}: no [[change]] tables; list the merged changes in merge order", source));
  }
  std::vector<Change> history;
  std::set<std::string> ids;
  for (const auto& entry : *entries) {
    const toml::table* table = entry.as_table();
    if (table == nullptr) {
      return fail(Errc::config, fmt::format("{}: change must be an array of tables ([[change]])",
                                            where(source, entry.source())));
    }
    const TimeMs default_time = first_merged_at_ms + static_cast<TimeMs>(history.size()) * kMinuteMs;
    auto change = parse_change(*table, source, default_time);
    if (!change) return tl::unexpected(change.error());
    const std::string at = where(source, table->source());
    if (!ids.insert(change->id).second) {
      return fail(Errc::config, fmt::format("{}: change id {} appears twice; ids must be unique", at, change->id));
    }
    if (!history.empty() && change->merged_at_ms < history.back().merged_at_ms) {
      return fail(Errc::config, fmt::format("{}: change {} is merged before the change above it; list changes in "
                                            "merge order",
                                            at, change->id));
    }
    history.push_back(std::move(*change));
  }
  return history;
}

}  // namespace kiln::qualification
