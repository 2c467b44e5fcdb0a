#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/config/toml_errors.h"
#include "coordinator/scheduler/knobs_toml.h"

namespace kiln::scheduler {

std::optional<int> SchedulerKnobs::quota(RequestClass cls, const std::string& revision) const {
  auto it = quota_chips.find({cls, revision});
  if (it == quota_chips.end()) return std::nullopt;
  return it->second;
}

namespace {

const std::vector<std::string_view>& knob_names() {
  static const std::vector<std::string_view> names = {
      "policy",    "grace_ms",         "max_lease_ms", "max_pending_requests", "max_nodes", "max_reservations",
      "lease_slack", "target_start_latency_ms", "may_borrow", "quota_chips"};
  return names;
}

// Errors of one [scheduler] table: "file:line:column: [scheduler] key: what; fix it ...".
class KnobErrors {
 public:
  explicit KnobErrors(std::string_view source) : source_(source) {}

  tl::unexpected<Error> operator()(const toml::node& node, std::string_view key, std::string_view what) const {
    return fail(Errc::config, fmt::format("{}: [scheduler] {}: {}; fix it in the coordinator config "
                                          "(see docs/performance.md for the keys)",
                                          config::where(source_, node.source()), key, what));
  }

  Result<std::int64_t> integer(const toml::node& node, std::string_view key, std::int64_t min) const {
    auto value = node.value_exact<std::int64_t>();
    if (!value) return (*this)(node, key, "expected an integer");
    if (*value < min) return (*this)(node, key, fmt::format("must be at least {}", min));
    return *value;
  }

  Result<RequestClass> request_class(const toml::node& node, std::string_view key, std::string_view name) const {
    auto cls = parse_request_class(name);
    if (!cls) {
      return (*this)(node, key, fmt::format("unknown class '{}' (release, presubmit, bisect, nightly, experiment)",
                                            name));
    }
    return *cls;
  }

 private:
  std::string_view source_;
};

Result<SchedulerKnobs> parse_document(std::string_view toml_text, std::string_view source) {
  auto doc = config::parse_toml(toml_text, source, "fix the syntax");
  if (!doc) return tl::unexpected(doc.error());
  const toml::node* section = doc->get("scheduler");
  if (!section) return SchedulerKnobs{};
  const toml::table* table = section->as_table();
  if (!table) return KnobErrors(source)(*section, "scheduler", "expected a table [scheduler]");
  return parse_scheduler_knobs(*table, source);
}

}  // namespace

Result<SchedulerKnobs> parse_scheduler_knobs(const toml::table& table, std::string_view source) {
  const KnobErrors knob_error(source);
  SchedulerKnobs knobs;
  for (const auto& [key_node, node] : table) {
    const std::string_view key = key_node.str();
    if (key == "policy") {
      auto name = node.value<std::string>();
      auto policy = name ? parse_policy(*name) : std::nullopt;
      if (!policy) return knob_error(node, key, "expected \"kiln\", \"fifo\" or \"strict_priority\"");
      knobs.policy = *policy;
    } else if (key == "grace_ms") {
      auto v = knob_error.integer(node, key, 0);
      if (!v) return tl::unexpected(v.error());
      knobs.grace_ms = *v;
    } else if (key == "max_lease_ms") {
      auto v = knob_error.integer(node, key, 1);
      if (!v) return tl::unexpected(v.error());
      knobs.max_lease_ms = *v;
    } else if (key == "max_pending_requests" || key == "max_nodes" ||
               key == "max_reservations") {
      auto v = knob_error.integer(node, key, key == "max_reservations" ? 0 : 1);
      if (!v) return tl::unexpected(v.error());
      std::size_t& target = key == "max_nodes"          ? knobs.max_nodes
                            : key == "max_reservations" ? knobs.max_reservations
                                                        : knobs.max_pending_requests;
      target = static_cast<std::size_t>(*v);
    } else if (key == "lease_slack") {
      auto v = node.value<double>();
      if (!v || *v < 1.0) return knob_error(node, key, "expected a number of at least 1.0");
      knobs.lease_slack = *v;
    } else if (key == "target_start_latency_ms" || key == "may_borrow") {
      const toml::table* sub = node.as_table();
      if (!sub) return knob_error(node, key, "expected a table keyed by class");
      for (const auto& [cls_key, cls_node] : *sub) {
        std::string full = fmt::format("{}.{}", key, cls_key.str());
        auto cls = knob_error.request_class(cls_node, full, cls_key.str());
        if (!cls) return tl::unexpected(cls.error());
        if (key == "may_borrow") {
          auto b = cls_node.value_exact<bool>();
          if (!b) return knob_error(cls_node, full, "expected true or false");
          knobs.may_borrow[rank(*cls)] = *b;
        } else {
          auto v = knob_error.integer(cls_node, full, -1);
          if (!v) return tl::unexpected(v.error());
          knobs.target_start_latency_ms[rank(*cls)] =
              *v < 0 ? std::nullopt : std::optional<DurationMs>(*v);
        }
      }
    } else if (key == "quota_chips") {
      const toml::table* sub = node.as_table();
      if (!sub) return knob_error(node, key, "expected tables [scheduler.quota_chips.<class>]");
      for (const auto& [cls_key, cls_node] : *sub) {
        std::string full = fmt::format("quota_chips.{}", cls_key.str());
        auto cls = knob_error.request_class(cls_node, full, cls_key.str());
        if (!cls) return tl::unexpected(cls.error());
        const toml::table* revs = cls_node.as_table();
        if (!revs) return knob_error(cls_node, full, "expected a table of revision = chips");
        for (const auto& [rev_key, rev_node] : *revs) {
          std::string rev_full = fmt::format("{}.{}", full, rev_key.str());
          auto v = knob_error.integer(rev_node, rev_full, 0);
          if (!v) return tl::unexpected(v.error());
          knobs.quota_chips[{*cls, std::string(rev_key.str())}] = static_cast<int>(*v);
        }
      }
    } else {
      return knob_error(node, key, "unknown key" + config::suggestion(key, knob_names()));
    }
  }
  return knobs;
}

Result<SchedulerKnobs> parse_scheduler_knobs_toml(std::string_view toml_text) {
  return parse_document(toml_text, "scheduler knobs");
}

Result<SchedulerKnobs> load_scheduler_knobs(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read scheduler knobs from '{}'; check the path",
                                      path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_document(text.str(), path);
}

}  // namespace kiln::scheduler
