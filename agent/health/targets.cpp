#include "agent/health/targets.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/config/toml_errors.h"

namespace kiln::agent::health {
namespace {

using config::where;

// Collects every problem in the file so the user fixes them in one pass.
struct Problems {
  std::string_view origin;
  std::vector<std::string> lines;

  void add(const toml::node& node, const std::string& what) { add(node.source(), what); }
  void add(const toml::key& key, const std::string& what) { add(key.source(), what); }
  void add(const toml::source_region& region, const std::string& what) {
    lines.push_back(where(origin, region) + ": " + what);
  }
};

std::optional<double> read_number(const toml::node& node, const std::string& key,
                                  Problems& problems) {
  if (auto value = node.value<double>(); value && (node.is_floating_point() || node.is_integer())) {
    return *value;
  }
  problems.add(node, "'" + key + "' must be a number");
  return std::nullopt;
}

std::optional<std::uint64_t> read_count(const toml::node& node, const std::string& key,
                                        Problems& problems) {
  if (auto value = node.value_exact<std::int64_t>(); value && *value >= 0) {
    return static_cast<std::uint64_t>(*value);
  }
  problems.add(node, "'" + key + "' must be a whole number >= 0");
  return std::nullopt;
}

const std::vector<std::string_view>& revision_keys() {
  static const std::vector<std::string_view> keys = {
      "memory_bandwidth_gb_per_s", "interconnect_bandwidth_gb_per_s",
      "compute_tflop_per_s",       "warn_temperature_c",
      "fail_temperature_c",        "max_power_w",
      "warn_ecc_corrected",        "fail_ecc_uncorrected"};
  return keys;
}

void apply_revision(const std::string& name, const toml::table& table, bool known,
                    RevisionTargets& targets, Problems& problems) {
  for (const auto& [key_node, value] : table) {
    const std::string key(key_node.str());
    std::optional<double> number;
    std::optional<std::uint64_t> count;
    if (key == "warn_ecc_corrected" || key == "fail_ecc_uncorrected") {
      count = read_count(value, key, problems);
    } else if (std::find(revision_keys().begin(), revision_keys().end(), key) !=
               revision_keys().end()) {
      number = read_number(value, key, problems);
    } else {
      problems.add(key_node, "unknown key '" + key + "' in [revision." + name + "]" +
                                 config::suggestion(key, revision_keys()));
      continue;
    }
    if (number && *number <= 0) {
      problems.add(value, "'" + key + "' in [revision." + name + "] must be > 0");
      continue;
    }
    if (key == "memory_bandwidth_gb_per_s" && number) targets.memory_bandwidth_gb_per_s = *number;
    if (key == "interconnect_bandwidth_gb_per_s" && number) {
      targets.interconnect_bandwidth_gb_per_s = *number;
    }
    if (key == "compute_tflop_per_s" && number) targets.compute_tflop_per_s = *number;
    if (key == "warn_temperature_c" && number) targets.warn_temperature_c = *number;
    if (key == "fail_temperature_c" && number) targets.fail_temperature_c = *number;
    if (key == "max_power_w" && number) targets.max_power_w = *number;
    if (key == "warn_ecc_corrected" && count) targets.warn_ecc_corrected = *count;
    if (key == "fail_ecc_uncorrected" && count) {
      if (*count == 0) {
        problems.add(value, "'fail_ecc_uncorrected' must be >= 1 (1 fails on any error)");
      } else {
        targets.fail_ecc_uncorrected = *count;
      }
    }
  }
  if (!known) {
    for (const auto& key : revision_keys()) {
      if (key == "fail_ecc_uncorrected") continue;  // defaults to 1 for every revision
      if (!table.contains(key)) {
        problems.add(table, "[revision." + name + "] is a new revision: give '" + std::string(key) + "'");
      }
    }
  }
  if (targets.fail_temperature_c <= targets.warn_temperature_c) {
    problems.add(table, "[revision." + name +
                            "]: fail_temperature_c must be above warn_temperature_c");
  }
}

}  // namespace

const RevisionTargets* HealthTargets::find(std::string_view revision) const {
  auto it = revisions.find(std::string(revision));
  return it == revisions.end() ? nullptr : &it->second;
}

HealthTargets default_health_targets() {
  HealthTargets targets;
  // Nominal figures of docs/driver-abi.md (sim/chip/model.h's profile()); limits sit above
  // the loaded temperature and power with margin, below the throttle point of 90 C for warn.
  targets.revisions["a"] = RevisionTargets{
      .memory_bandwidth_gb_per_s = 1600,
      .interconnect_bandwidth_gb_per_s = 300,
      .compute_tflop_per_s = 190,
      .warn_temperature_c = 85,
      .fail_temperature_c = 95,
      .max_power_w = 400,
      .warn_ecc_corrected = 100,
      .fail_ecc_uncorrected = 1,
  };
  targets.revisions["b"] = RevisionTargets{
      .memory_bandwidth_gb_per_s = 2400,
      .interconnect_bandwidth_gb_per_s = 450,
      .compute_tflop_per_s = 310,
      .warn_temperature_c = 82,
      .fail_temperature_c = 92,
      .max_power_w = 500,
      .warn_ecc_corrected = 100,
      .fail_ecc_uncorrected = 1,
  };
  // The CPU backend's host: no self-tests, power or ECC to judge (it declares none); a CPU runs
  // hot under load, so warn and fail sit at the usual package limits.
  RevisionTargets& cpu = targets.revisions["cpu"];
  cpu.warn_temperature_c = 90;
  cpu.fail_temperature_c = 100;
  return targets;
}

Result<HealthTargets> parse_health_targets(std::string_view toml_text, std::string_view origin) {
  auto parsed = config::parse_toml(toml_text, origin, "fix the TOML syntax of the health targets file");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& root = *parsed;

  HealthTargets targets = default_health_targets();
  Problems problems{origin, {}};
  for (const auto& [key_node, value] : root) {
    const std::string key(key_node.str());
    if (key == "expected_chip_count") {
      if (auto count = read_count(value, key, problems)) {
        if (*count > 1024) {
          problems.add(value, "'expected_chip_count' must be at most 1024 (0: not checked)");
        } else {
          targets.expected_chip_count = static_cast<std::uint32_t>(*count);
        }
      }
    } else if (key == "warn_below_fraction" || key == "fail_below_fraction") {
      if (auto fraction = read_number(value, key, problems)) {
        if (*fraction <= 0 || *fraction > 1) {
          problems.add(value, "'" + key + "' must be in (0, 1]");
        } else {
          (key == "warn_below_fraction" ? targets.warn_below_fraction
                                        : targets.fail_below_fraction) = *fraction;
        }
      }
    } else if (key == "revision") {
      const toml::table* revisions = value.as_table();
      if (revisions == nullptr) {
        problems.add(value, "'revision' must be a table of [revision.X] tables");
        continue;
      }
      for (const auto& [name_node, revision_value] : *revisions) {
        const std::string name(name_node.str());
        const toml::table* table = revision_value.as_table();
        if (table == nullptr) {
          problems.add(revision_value, "[revision." + name + "] must be a table");
          continue;
        }
        const bool known = targets.revisions.count(name) > 0;
        apply_revision(name, *table, known, targets.revisions[name], problems);
      }
    } else {
      problems.add(key_node, "unknown key '" + key + "'" +
                                 config::suggestion(key, {"expected_chip_count", "warn_below_fraction",
                                                          "fail_below_fraction", "revision"}));
    }
  }
  if (targets.fail_below_fraction >= targets.warn_below_fraction) {
    problems.add(root, "fail_below_fraction must be below warn_below_fraction");
  }
  if (!problems.lines.empty()) {
    std::string message;
    for (const auto& line : problems.lines) message += (message.empty() ? "" : "\n") + line;
    return fail(Errc::config, message);
  }
  return targets;
}

Result<HealthTargets> load_health_targets(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::not_found, "cannot read the health targets file '" + path +
                                     "'; check the path and its permissions");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_health_targets(text.str(), path);
}

}  // namespace kiln::agent::health
