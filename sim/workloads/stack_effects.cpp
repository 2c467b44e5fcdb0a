#include "sim/workloads/stack_effects.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include "common/config/toml_errors.h"
#include "sim/workloads/registry.h"

namespace kiln::sim::workloads {

double StackEffects::throughput_factor(std::string_view model) const {
  auto it = throughput_factors.find(std::string(model));
  return it == throughput_factors.end() ? default_throughput_factor : it->second;
}

namespace {

std::set<std::string> known_components() {
  std::set<std::string> names;
  for (const auto& model : model_registry()) names.insert(model.components.begin(), model.components.end());
  return names;
}

using config::where;

Result<double> factor_value(std::string_view source, const toml::node& node, std::string_view key) {
  const auto value = node.value<double>();
  if (!value || !(*value > 0.0 && *value <= 10.0)) {
    return fail(Errc::config, fmt::format("{}: [throughput] \"{}\" must be a number in (0, 10], e.g. 0.97 for a 3% "
                                          "slowdown",
                                          where(source, node.source()), key));
  }
  return *value;
}

}  // namespace

Result<StackEffects> parse_stack_effects(std::string_view toml_text, std::string_view source) {
  auto parsed = config::parse_toml(toml_text, source, "fix the stack-effects file");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& root = *parsed;
  if (auto ok = config::check_known_keys(source, root, "a stack-effects file (it has bundle = \"...\", [throughput] "
                                                       "and [numerics])",
                                         {"bundle", "throughput", "numerics"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  StackEffects effects;
  effects.source = std::string(source);
  for (const auto& [key, node] : root) {
    if (key == "bundle" && node.is_string()) continue;
    if (key == "throughput" && node.is_table()) {
      for (const auto& [model, value] : *node.as_table()) {
        auto factor = factor_value(source, value, model.str());
        if (!factor) return tl::unexpected(factor.error());
        if (model.str() == "default") {
          effects.default_throughput_factor = *factor;
        } else if (find_model(model.str()) == nullptr) {
          std::vector<std::string_view> names = {"default"};
          for (const auto& known : model_registry()) names.emplace_back(known.name);
          const auto near = config::nearest_name(model.str(), names);
          return fail(Errc::config, fmt::format("{}: [throughput] names model '{}' that the simulated workloads do not "
                                                "have{}; use one of kiln-workload-model --list, or \"default\"",
                                                where(source, model.source()), model.str(),
                                                near ? fmt::format(" (did you mean '{}'?)", *near) : ""));
        } else {
          effects.throughput_factors[std::string(model.str())] = *factor;
        }
      }
      continue;
    }
    if (key == "numerics" && node.is_table()) {
      const auto known = known_components();
      const std::vector<std::string_view> kernel_names(known.begin(), known.end());
      if (auto ok = config::check_known_keys(source, *node.as_table(), "[numerics]", {"kernels"}); !ok) {
        return tl::unexpected(ok.error());
      }
      for (const auto& [nkey, value] : *node.as_table()) {
        if (!value.is_array()) {
          return fail(Errc::config, fmt::format("{}: [numerics] takes only kernels = [\"gemm-bf16\", ...]",
                                                where(source, value.source())));
        }
        for (const auto& kernel : *value.as_array()) {
          const auto name = kernel.value<std::string>();
          if (!name || known.count(*name) == 0) {
            return fail(Errc::config, fmt::format("{}: [numerics] kernels: '{}' is not a kernel of any model{}",
                                                  where(source, kernel.source()), name.value_or("(not a string)"),
                                                  config::suggestion(name.value_or(""), kernel_names)));
          }
          effects.faulty_kernels.insert(*name);
        }
      }
      continue;
    }
    return fail(Errc::config, fmt::format("{}: {} must be {}", where(source, node.source()), key.str(),
                                          key == "bundle" ? "a string" : "a table"));
  }
  return effects;
}

Result<StackEffects> read_stack_effects_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read the stack-effects file {}; check the path",
                                      path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_stack_effects(text.str(), path.string());
}

nlohmann::json to_json(const StackEffects& effects) {
  return {{"source", effects.source},
          {"default_throughput_factor", effects.default_throughput_factor},
          {"throughput_factors", effects.throughput_factors},
          {"faulty_kernels", effects.faulty_kernels}};
}

}  // namespace kiln::sim::workloads
