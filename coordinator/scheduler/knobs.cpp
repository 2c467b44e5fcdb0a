#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "coordinator/scheduler/knobs_toml.h"

namespace kiln::scheduler {

std::string_view to_string(Policy policy) {
  switch (policy) {
    case Policy::kiln: return "kiln";
    case Policy::fifo: return "fifo";
    case Policy::strict_priority: return "strict_priority";
  }
  return "kiln";
}

std::optional<Policy> parse_policy(std::string_view name) {
  for (Policy p : {Policy::kiln, Policy::fifo, Policy::strict_priority}) {
    if (to_string(p) == name) return p;
  }
  return std::nullopt;
}

std::optional<int> SchedulerKnobs::quota(RequestClass cls, const std::string& revision) const {
  auto it = quota_chips.find({cls, revision});
  if (it == quota_chips.end()) return std::nullopt;
  return it->second;
}

namespace {

tl::unexpected<Error> knob_error(std::string_view key, std::string_view what) {
  return fail(Errc::config, fmt::format("[scheduler] {}: {}; fix it in the coordinator config "
                                        "(see coordinator/scheduler/knobs.h for the keys)",
                                        key, what));
}

Result<std::int64_t> get_integer(const toml::node& node, std::string_view key, std::int64_t min) {
  auto value = node.value_exact<std::int64_t>();
  if (!value) return knob_error(key, "expected an integer");
  if (*value < min) return knob_error(key, fmt::format("must be at least {}", min));
  return *value;
}

Result<RequestClass> get_class(std::string_view key, std::string_view name) {
  auto cls = parse_request_class(name);
  if (!cls) {
    return knob_error(key, fmt::format("unknown class '{}' (release, presubmit, bisect, nightly, "
                                       "experiment)", name));
  }
  return *cls;
}

}  // namespace

Result<SchedulerKnobs> parse_scheduler_knobs(const toml::table& table) {
  SchedulerKnobs knobs;
  for (const auto& [key_node, node] : table) {
    const std::string_view key = key_node.str();
    if (key == "policy") {
      auto name = node.value<std::string>();
      auto policy = name ? parse_policy(*name) : std::nullopt;
      if (!policy) return knob_error(key, "expected \"kiln\", \"fifo\" or \"strict_priority\"");
      knobs.policy = *policy;
    } else if (key == "grace_ms") {
      auto v = get_integer(node, key, 0);
      if (!v) return tl::unexpected(v.error());
      knobs.grace_ms = *v;
    } else if (key == "max_lease_ms") {
      auto v = get_integer(node, key, 1);
      if (!v) return tl::unexpected(v.error());
      knobs.max_lease_ms = *v;
    } else if (key == "max_pending_requests" || key == "max_nodes" ||
               key == "max_reservations") {
      auto v = get_integer(node, key, key == "max_reservations" ? 0 : 1);
      if (!v) return tl::unexpected(v.error());
      std::size_t& target = key == "max_nodes"          ? knobs.max_nodes
                            : key == "max_reservations" ? knobs.max_reservations
                                                        : knobs.max_pending_requests;
      target = static_cast<std::size_t>(*v);
    } else if (key == "lease_slack") {
      auto v = node.value<double>();
      if (!v || *v < 1.0) return knob_error(key, "expected a number of at least 1.0");
      knobs.lease_slack = *v;
    } else if (key == "target_start_latency_ms" || key == "may_borrow") {
      const toml::table* sub = node.as_table();
      if (!sub) return knob_error(key, "expected a table keyed by class");
      for (const auto& [cls_key, cls_node] : *sub) {
        std::string full = fmt::format("{}.{}", key, cls_key.str());
        auto cls = get_class(full, cls_key.str());
        if (!cls) return tl::unexpected(cls.error());
        if (key == "may_borrow") {
          auto b = cls_node.value_exact<bool>();
          if (!b) return knob_error(full, "expected true or false");
          knobs.may_borrow[rank(*cls)] = *b;
        } else {
          auto v = get_integer(cls_node, full, -1);
          if (!v) return tl::unexpected(v.error());
          knobs.target_start_latency_ms[rank(*cls)] =
              *v < 0 ? std::nullopt : std::optional<DurationMs>(*v);
        }
      }
    } else if (key == "quota_chips") {
      const toml::table* sub = node.as_table();
      if (!sub) return knob_error(key, "expected tables [scheduler.quota_chips.<class>]");
      for (const auto& [cls_key, cls_node] : *sub) {
        std::string full = fmt::format("quota_chips.{}", cls_key.str());
        auto cls = get_class(full, cls_key.str());
        if (!cls) return tl::unexpected(cls.error());
        const toml::table* revs = cls_node.as_table();
        if (!revs) return knob_error(full, "expected a table of revision = chips");
        for (const auto& [rev_key, rev_node] : *revs) {
          std::string rev_full = fmt::format("{}.{}", full, rev_key.str());
          auto v = get_integer(rev_node, rev_full, 0);
          if (!v) return tl::unexpected(v.error());
          knobs.quota_chips[{*cls, std::string(rev_key.str())}] = static_cast<int>(*v);
        }
      }
    } else {
      return knob_error(key, "unknown key");
    }
  }
  return knobs;
}

Result<SchedulerKnobs> parse_scheduler_knobs_toml(std::string_view toml_text) {
  toml::table doc;
  try {
    doc = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    return fail(Errc::config, fmt::format("scheduler knobs are not valid TOML: {} (line {}); fix "
                                          "the syntax",
                                          e.description(), e.source().begin.line));
  }
  const toml::node* section = doc.get("scheduler");
  if (!section) return SchedulerKnobs{};
  const toml::table* table = section->as_table();
  if (!table) return knob_error("scheduler", "expected a table [scheduler]");
  return parse_scheduler_knobs(*table);
}

Result<SchedulerKnobs> load_scheduler_knobs(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read scheduler knobs from '{}'; check the path",
                                      path));
  }
  std::stringstream text;
  text << in.rdbuf();
  auto knobs = parse_scheduler_knobs_toml(text.str());
  if (!knobs) {
    return fail(knobs.error().code, fmt::format("{}: {}", path, knobs.error().message));
  }
  return knobs;
}

}  // namespace kiln::scheduler
