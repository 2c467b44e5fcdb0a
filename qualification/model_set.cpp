#include "qualification/model_set.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "records/toml_text.h"
#include "common/config/toml_errors.h"
#include "qualification/workload_catalog.h"

namespace kiln::qualification {

const QualificationModel* ModelSet::find(std::string_view name) const {
  auto it = std::find_if(models.begin(), models.end(), [&](const QualificationModel& m) { return m.name == name; });
  return it == models.end() ? nullptr : &*it;
}

const QualificationModel* ModelSet::probe_model_for(std::string_view name) const {
  const QualificationModel* model = find(name);
  if (model == nullptr || !model->proxy) return model;
  const QualificationModel* proxy = find(*model->proxy);
  return proxy != nullptr ? proxy : model;
}

Status validate(const ModelSet& set) {
  if (set.models.empty()) return fail(Errc::config, "the qualification set has no [[model]]; add at least one");
  std::set<std::string> names;
  for (const auto& model : set.models) {
    if (model.name.empty()) return fail(Errc::config, "a [[model]] has an empty name; give every model a name");
    if (!names.insert(model.name).second) {
      return fail(Errc::config, fmt::format("model '{}' is declared twice; model names must be unique", model.name));
    }
  }
  for (const auto& model : set.models) {
    const std::string& name = model.name;
    if (model.chips <= 0) return fail(Errc::config, fmt::format("model '{}': chips must be positive", name));
    const BenchmarkDefaults& bench = model.benchmark;
    if ((bench.repeats && (*bench.repeats < 1 || *bench.repeats > 1000)) || bench.warmup_min > bench.warmup_max ||
        bench.warmup_max > 1000 || bench.steady_window < 2 ||
        !(bench.steady_tolerance > 0.0 && bench.steady_tolerance < 1.0)) {
      return fail(Errc::config, fmt::format("model '{}': benchmark settings must have repeats 1 to 1000, warmup_min <= "
                                            "warmup_max <= 1000, steady_window >= 2 and steady_tolerance in (0, 1)",
                                            name));
    }
    if (model.minutes <= 0) return fail(Errc::config, fmt::format("model '{}': minutes must be positive", name));
    if (!(model.eval_threshold > 0.0 && model.eval_threshold <= 1.0)) {
      return fail(Errc::config,
                  fmt::format("model '{}': eval_threshold {} must be in (0, 1], e.g. 0.99 for 99% of the reference",
                              name, model.eval_threshold));
    }
    if (model.owner_team.empty()) {
      return fail(Errc::config, fmt::format("model '{}' has no owner_team; every test needs an owner", name));
    }
    if (model.components.empty()) {
      return fail(Errc::config, fmt::format("model '{}' declares no components; list the kernels it uses so changes "
                                            "to them select it",
                                            name));
    }
    if (model.proxy) {
      const QualificationModel* proxy = set.find(*model.proxy);
      if (proxy == nullptr || proxy == &model) {
        return fail(Errc::config,
                    fmt::format("model '{}': proxy '{}' must name another model of the set", name, *model.proxy));
      }
      if (proxy->size_class > model.size_class || proxy->chips > model.chips) {
        return fail(Errc::config, fmt::format("model '{}': proxy '{}' is larger than the model; a proxy must be a "
                                              "cheaper config",
                                              name, proxy->name));
      }
    }
  }
  return {};
}

namespace {

using config::where;

const std::vector<std::string_view>& known_keys() {
  static const std::vector<std::string_view> keys = {"name",       "size_class", "chips",          "minutes",
                                             "components", "proxy",      "eval_threshold", "owner_team",
                                             "workload",   "seed",       "data_seed",      "presubmit_default",
                                             "repeats",    "warmup_min", "warmup_max",     "steady_window",
                                             "steady_tolerance"};
  return keys;
}

Result<std::string> required_string(const toml::table& table, std::string_view key, std::string_view at) {
  const auto value = table[key].value<std::string>();
  if (!value) return fail(Errc::config, fmt::format("{}: [[model]] needs {} as a string", at, key));
  return *value;
}

Result<std::int64_t> required_int(const toml::table& table, std::string_view key, std::string_view at) {
  const auto value = table[key].value_exact<std::int64_t>();
  if (!value) return fail(Errc::config, fmt::format("{}: [[model]] needs {} as an integer", at, key));
  return *value;
}

Result<std::uint64_t> optional_seed(const toml::table& table, std::string_view key, std::string_view at) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return 1;
  const auto value = node->value_exact<std::int64_t>();
  if (!value || *value < 0) return fail(Errc::config, fmt::format("{}: {} must be a non-negative integer", at, key));
  return static_cast<std::uint64_t>(*value);
}

Result<QualificationModel> parse_model(const toml::table& table, std::string_view source) {
  const std::string at = where(source, table.source());
  if (auto ok = config::check_known_keys(source, table, "[[model]]", known_keys()); !ok) {
    return tl::unexpected(ok.error());
  }
  QualificationModel model;
  auto name = required_string(table, "name", at);
  if (!name) return tl::unexpected(name.error());
  model.name = *name;
  const std::string in = fmt::format("{} (model '{}')", at, model.name);
  auto size = required_string(table, "size_class", in);
  if (!size) return tl::unexpected(size.error());
  const auto size_class = size_class_from_string(*size);
  if (!size_class) {
    return fail(Errc::config, fmt::format("{}: size_class '{}' must be small, medium or large", in, *size));
  }
  model.size_class = *size_class;
  auto chips = required_int(table, "chips", in);
  if (!chips) return tl::unexpected(chips.error());
  auto minutes = required_int(table, "minutes", in);
  if (!minutes) return tl::unexpected(minutes.error());
  if (*chips <= 0 || *chips > 4096 || *minutes <= 0 || *minutes > 7 * 24 * 60) {
    return fail(Errc::config, fmt::format("{}: chips must be in 1..4096 and minutes in 1..10080", in));
  }
  model.chips = static_cast<int>(*chips);
  model.minutes = static_cast<int>(*minutes);
  auto owner = required_string(table, "owner_team", in);
  if (!owner) return tl::unexpected(owner.error());
  model.owner_team = *owner;
  const toml::array* components = table["components"].as_array();
  if (components == nullptr) {
    return fail(Errc::config, fmt::format("{}: components must be an array of kernel names", in));
  }
  for (const auto& component : *components) {
    const auto text = component.value<std::string>();
    if (!text || text->empty()) {
      return fail(Errc::config, fmt::format("{}: every component must be a non-empty string",
                                            where(source, component.source())));
    }
    model.components.push_back(*text);
  }
  if (const toml::node* proxy = table.get("proxy")) {
    const auto text = proxy->value<std::string>();
    if (!text) return fail(Errc::config, fmt::format("{}: proxy must be a model name", in));
    model.proxy = *text;
  }
  if (const toml::node* threshold = table.get("eval_threshold")) {
    const auto value = threshold->value<double>();
    if (!value) return fail(Errc::config, fmt::format("{}: eval_threshold must be a number such as 0.99", in));
    model.eval_threshold = *value;
  }
  if (const toml::node* workload = table.get("workload")) {
    const auto text = workload->value<std::string>();
    if (!text) return fail(Errc::config, fmt::format("{}: workload must be a string naming a workload of the catalog", in));
    model.workload = *text;
  }
  auto seed = optional_seed(table, "seed", in);
  if (!seed) return tl::unexpected(seed.error());
  model.seed = *seed;
  auto data_seed = optional_seed(table, "data_seed", in);
  if (!data_seed) return tl::unexpected(data_seed.error());
  model.data_seed = *data_seed;
  if (const toml::node* flag = table.get("presubmit_default")) {
    const auto value = flag->value<bool>();
    if (!value) return fail(Errc::config, fmt::format("{}: presubmit_default must be true or false", in));
    model.presubmit_default = *value;
  }
  auto count = [&](std::string_view key, std::uint32_t& out) -> Status {
    const toml::node* node = table.get(key);
    if (node == nullptr) return {};
    const auto value = node->value_exact<std::int64_t>();
    if (!value || *value < 0 || *value > 1000) {
      return fail(Errc::config, fmt::format("{}: {} must be an integer from 0 to 1000", in, key));
    }
    out = static_cast<std::uint32_t>(*value);
    return {};
  };
  if (table.get("repeats") != nullptr) {
    std::uint32_t repeats = 0;
    if (auto ok = count("repeats", repeats); !ok) return tl::unexpected(ok.error());
    model.benchmark.repeats = repeats;
  }
  for (auto [key, field] : {std::pair<std::string_view, std::uint32_t*>{"warmup_min", &model.benchmark.warmup_min},
                            {"warmup_max", &model.benchmark.warmup_max},
                            {"steady_window", &model.benchmark.steady_window}}) {
    if (auto ok = count(key, *field); !ok) return tl::unexpected(ok.error());
  }
  if (const toml::node* tolerance = table.get("steady_tolerance")) {
    const auto value = tolerance->value<double>();
    if (!value) return fail(Errc::config, fmt::format("{}: steady_tolerance must be a number such as 0.03", in));
    model.benchmark.steady_tolerance = *value;
  }
  return model;
}

}  // namespace

Result<ModelSet> parse_model_set(std::string_view toml_text, std::string_view source) {
  auto parsed = config::parse_toml(toml_text, source, "fix the qualification set file");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& root = *parsed;
  if (auto ok = config::check_known_keys(source, root, "the top level (the file holds [[model]] tables only)",
                                         {"model"});
      !ok) {
    return tl::unexpected(ok.error());
  }
  const toml::array* entries = root["model"].as_array();
  if (entries == nullptr) {
    return fail(Errc::config, fmt::format("{}: no [[model]] tables; declare the qualification set's models", source));
  }
  ModelSet set;
  for (const auto& entry : *entries) {
    const toml::table* table = entry.as_table();
    if (table == nullptr) {
      return fail(Errc::config, fmt::format("{}: model must be an array of tables ([[model]])",
                                            where(source, entry.source())));
    }
    auto model = parse_model(*table, source);
    if (!model) return tl::unexpected(model.error());
    set.models.push_back(std::move(*model));
  }
  if (auto ok = validate(set); !ok) {
    return fail(ok.error().code, fmt::format("{}: {}", source, ok.error().message));
  }
  return set;
}

Result<ModelSet> load_model_set_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read the qualification set {}; check the path and its permissions",
                                      path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_set(text.str(), path.string());
}

std::string to_toml(const ModelSet& set) {
  std::ostringstream out;
  out << "# The qualification set: the models the nightly runs (docs/qualification.md).\n";
  for (const auto& model : set.models) {
    out << "\n[[model]]\n";
    out << "name = " << detail::toml_quote(model.name) << "\n";
    out << "size_class = " << detail::toml_quote(to_string(model.size_class)) << "\n";
    out << "chips = " << model.chips << "\n";
    out << "minutes = " << model.minutes << "\n";
    out << "components = [";
    for (std::size_t i = 0; i < model.components.size(); ++i) {
      out << (i ? ", " : "") << detail::toml_quote(model.components[i]);
    }
    out << "]\n";
    if (model.proxy) out << "proxy = " << detail::toml_quote(*model.proxy) << "\n";
    out << "eval_threshold = " << detail::toml_float(model.eval_threshold) << "\n";
    out << "owner_team = " << detail::toml_quote(model.owner_team) << "\n";
    if (model.workload) out << "workload = " << detail::toml_quote(*model.workload) << "\n";
    out << "seed = " << model.seed << "\n";
    out << "data_seed = " << model.data_seed << "\n";
    if (model.presubmit_default) out << "presubmit_default = true\n";
    const BenchmarkDefaults defaults;
    if (model.benchmark.repeats) out << "repeats = " << *model.benchmark.repeats << "\n";
    if (model.benchmark.warmup_min != defaults.warmup_min) out << "warmup_min = " << model.benchmark.warmup_min << "\n";
    if (model.benchmark.warmup_max != defaults.warmup_max) out << "warmup_max = " << model.benchmark.warmup_max << "\n";
    if (model.benchmark.steady_window != defaults.steady_window) {
      out << "steady_window = " << model.benchmark.steady_window << "\n";
    }
    if (model.benchmark.steady_tolerance != defaults.steady_tolerance) {
      out << "steady_tolerance = " << detail::toml_float(model.benchmark.steady_tolerance) << "\n";
    }
  }
  return out.str();
}

namespace {

std::string team_for(std::string_view workload) {
  if (workload.starts_with("mlp-")) return "recsys-models";
  if (workload.starts_with("transformer-block-")) return "llm-models";
  return "training-models";
}

}  // namespace

ModelSet generate_demo_model_set(const WorkloadCatalog& catalog) {
  // ci-day.toml's [nightly]: 40 small (1 chip, 10 min), 14 medium (8, 20), 6 large (32, 45).
  struct Tier {
    SizeClass size;
    int count;
    int chips;
    int minutes;
    std::vector<std::string> workloads;  // cycled through
  };
  std::vector<std::string> all_workloads;
  for (const auto& spec : catalog.workloads()) all_workloads.push_back(spec.name);
  // Large models are the language models and the training run, as in a real fleet.
  const std::vector<Tier> tiers = {
      {SizeClass::small, 40, 1, 10, all_workloads},
      {SizeClass::medium, 14, 8, 20, all_workloads},
      {SizeClass::large, 6, 32, 45, {"transformer-block-bf16", "transformer-block-fp8", "train-tiny"}},
  };
  ModelSet set;
  std::map<std::string, std::vector<std::string>> small_by_workload;
  std::uint64_t seed = 0;
  for (const auto& tier : tiers) {
    std::map<std::string, int> numbered;
    for (int i = 0; i < tier.count; ++i) {
      const std::string& workload = tier.workloads[static_cast<std::size_t>(i) % tier.workloads.size()];
      const auto* spec = catalog.find(workload);
      KILN_ASSERT(spec != nullptr, "the demo set names a workload the catalog lacks");
      const int number = ++numbered[workload];
      QualificationModel model;
      model.name = fmt::format("{}-{}-{:02}", workload, to_string(tier.size), number);
      model.size_class = tier.size;
      model.chips = tier.chips;
      model.minutes = tier.minutes;
      model.components = spec->components;
      model.owner_team = team_for(workload);
      model.workload = workload;
      model.seed = ++seed;
      if (tier.size == SizeClass::small) {
        model.presubmit_default = number == 1;
        small_by_workload[workload].push_back(model.name);
      } else {
        const auto& smalls = small_by_workload[workload];
        KILN_ASSERT(!smalls.empty(), "every demo workload has small configs to serve as proxies");
        model.proxy = smalls[static_cast<std::size_t>(number - 1) % smalls.size()];
      }
      set.models.push_back(std::move(model));
    }
  }
  return set;
}

}  // namespace kiln::qualification
