#include "common/stability/criteria.h"

#include <cmath>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/config/toml_errors.h"

namespace kiln::stability {

namespace {

using Member = std::variant<double StabilityCriteria::*, std::uint32_t StabilityCriteria::*,
                            std::uint64_t StabilityCriteria::*, bool StabilityCriteria::*>;

// One row per setting: its table and key in stability.toml (and, joined by '.', in the JSON).
struct Field {
  std::string_view table;
  std::string_view key;
  Member member;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      {"run", "time_scale", &StabilityCriteria::time_scale},
      {"run", "confidence", &StabilityCriteria::confidence},
      {"loss_spike", "band_relative", &StabilityCriteria::loss_spike_band_relative},
      {"loss_spike", "window_steps", &StabilityCriteria::loss_spike_window_steps},
      {"loss_spike", "smoothing_steps", &StabilityCriteria::loss_spike_smoothing_steps},
      {"hang", "minutes", &StabilityCriteria::hang_minutes},
      {"throughput_decay", "window_minutes", &StabilityCriteria::decay_window_minutes},
      {"throughput_decay", "max_drop", &StabilityCriteria::decay_max_drop},
      {"device_errors", "ecc_uncorrected_max", &StabilityCriteria::ecc_uncorrected_max},
      {"device_errors", "link_down", &StabilityCriteria::link_down_fails},
  };
  return all;
}

std::vector<std::string_view> keys_of(std::string_view table) {
  std::vector<std::string_view> keys;
  for (const auto& f : fields()) {
    if (f.table == table) keys.push_back(f.key);
  }
  return keys;
}

std::vector<std::string_view> tables() {
  std::vector<std::string_view> names;
  for (const auto& f : fields()) {
    if (names.empty() || names.back() != f.table) names.push_back(f.table);
  }
  return names;
}

Status out_of_range(std::string_view name, double value, std::string_view range) {
  return fail(Errc::config, fmt::format("stability criterion {} = {} is out of range; give {}", name, value, range));
}

// Sets one field from a TOML value; the message says what type the key wants.
Status set_from_toml(StabilityCriteria& criteria, const Field& field, const toml::node& node) {
  const std::string name = fmt::format("{}.{}", field.table, field.key);
  return std::visit(
      [&](auto member) -> Status {
        using T = std::remove_reference_t<decltype(criteria.*member)>;
        if constexpr (std::is_same_v<T, bool>) {
          auto value = node.value_exact<bool>();
          if (!value) return fail(Errc::config, name + " must be true or false");
          criteria.*member = *value;
        } else if constexpr (std::is_same_v<T, double>) {
          auto value = node.value<double>();  // an integer is a number too
          if (!value || !node.is_number()) return fail(Errc::config, name + " must be a number");
          criteria.*member = *value;
        } else {
          auto value = node.value_exact<std::int64_t>();
          if (!value || *value < 0) return fail(Errc::config, name + " must be a whole number, 0 or more");
          criteria.*member = static_cast<T>(*value);
        }
        return {};
      },
      field.member);
}

}  // namespace

Status validate(const StabilityCriteria& c) {
  if (!(c.time_scale > 0 && c.time_scale <= 1e6)) return out_of_range("run.time_scale", c.time_scale, "(0, 1e6]");
  if (!(c.confidence >= 0.5 && c.confidence <= 0.999)) {
    return out_of_range("run.confidence", c.confidence, "[0.5, 0.999]");
  }
  if (!(c.loss_spike_band_relative > 0 && c.loss_spike_band_relative <= 1000)) {
    return out_of_range("loss_spike.band_relative", c.loss_spike_band_relative, "(0, 1000]");
  }
  if (c.loss_spike_window_steps < 5 || c.loss_spike_window_steps > 10000) {
    return out_of_range("loss_spike.window_steps", c.loss_spike_window_steps, "5 to 10000");
  }
  if (c.loss_spike_smoothing_steps < 1 || c.loss_spike_smoothing_steps > 1000) {
    return out_of_range("loss_spike.smoothing_steps", c.loss_spike_smoothing_steps, "1 to 1000");
  }
  if (!(c.hang_minutes > 0 && c.hang_minutes <= 7 * 24 * 60)) {
    return out_of_range("hang.minutes", c.hang_minutes, "(0, 10080] (a week)");
  }
  if (!(c.decay_window_minutes > 0 && c.decay_window_minutes <= 7 * 24 * 60)) {
    return out_of_range("throughput_decay.window_minutes", c.decay_window_minutes, "(0, 10080] (a week)");
  }
  if (!(c.decay_max_drop > 0 && c.decay_max_drop < 1)) {
    return out_of_range("throughput_decay.max_drop", c.decay_max_drop, "a fraction in (0, 1)");
  }
  return {};
}

Result<StabilityCriteria> parse_criteria_toml(std::string_view text, std::string_view source) {
  auto root = config::parse_toml(text, source, "fix the stability criteria file");
  if (!root) return tl::unexpected(root.error());
  if (auto known = config::check_known_keys(source, *root, "the stability criteria", tables()); !known) {
    return tl::unexpected(known.error());
  }
  StabilityCriteria criteria;
  for (const auto table_name : tables()) {
    const toml::node* node = root->get(table_name);
    if (node == nullptr) continue;
    const toml::table* table = node->as_table();
    if (table == nullptr) {
      return fail(Errc::config, fmt::format("{}: {} must be a table ([{}])", config::where(source, node->source()),
                                            table_name, table_name));
    }
    if (auto known = config::check_known_keys(source, *table, fmt::format("[{}]", table_name), keys_of(table_name));
        !known) {
      return tl::unexpected(known.error());
    }
    for (const auto& field : fields()) {
      if (field.table != table_name) continue;
      const toml::node* value = table->get(field.key);
      if (value == nullptr) continue;
      if (auto set = set_from_toml(criteria, field, *value); !set) {
        return fail(Errc::config, config::where(source, value->source()) + ": " + set.error().message);
      }
    }
  }
  if (auto valid = validate(criteria); !valid) {
    return fail(Errc::config, fmt::format("{}: {}", source, valid.error().message));
  }
  return criteria;
}

Result<StabilityCriteria> read_criteria_file(const std::string& path) {
  auto text = config::read_text_file(path, "stability criteria file", "check the --criteria path");
  if (!text) return tl::unexpected(text.error());
  return parse_criteria_toml(*text, path);
}

nlohmann::json criteria_to_json(const StabilityCriteria& criteria) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& field : fields()) {
    std::visit([&](auto member) { out[std::string(field.table)][std::string(field.key)] = criteria.*member; },
               field.member);
  }
  return out;
}

Result<StabilityCriteria> criteria_from_json(const nlohmann::json& json) {
  StabilityCriteria criteria;
  if (!json.is_object()) return fail(Errc::invalid_argument, "the stability criteria are not a JSON object");
  for (const auto& field : fields()) {
    const std::string name = fmt::format("{}.{}", field.table, field.key);
    const auto table = json.find(std::string(field.table));
    if (table == json.end() || !table->is_object() || !table->contains(std::string(field.key))) {
      return fail(Errc::invalid_argument, "the stability criteria lack " + name + "; pass criteria_to_json's output");
    }
    const nlohmann::json& value = (*table)[std::string(field.key)];
    const Status set = std::visit(
        [&](auto member) -> Status {
          using T = std::remove_reference_t<decltype(criteria.*member)>;
          const bool fits = std::is_same_v<T, bool>     ? value.is_boolean()
                            : std::is_same_v<T, double> ? value.is_number()
                                                        : value.is_number_unsigned();
          if (!fits) return fail(Errc::invalid_argument, "the stability criterion " + name + " has the wrong type");
          criteria.*member = value.get<T>();
          return {};
        },
        field.member);
    if (!set) return tl::unexpected(set.error());
  }
  if (auto valid = validate(criteria); !valid) return fail(Errc::invalid_argument, valid.error().message);
  return criteria;
}

}  // namespace kiln::stability
