#include "sim/fleet/scenario.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/config/toml_errors.h"

namespace kiln::fleet {

namespace {

// Reading one scenario: every error names the file and the key.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  tl::unexpected<Error> error(std::string_view key, std::string_view what) const { return error_at(source_, key, what); }

  // An unknown key or table, at its position, with the nearest known name.
  tl::unexpected<Error> unknown(const toml::key& found, std::string_view full, std::string_view what,
                                const std::vector<std::string_view>& allowed) const {
    return error_at(config::where(source_, found.source()), full,
                    std::string(what) + config::suggestion(found.str(), allowed));
  }

  Result<const toml::table*> table(const toml::table& parent, std::string_view key,
                                   const std::vector<std::string_view>& allowed) const {
    const toml::table* t = parent[key].as_table();
    if (!t) return error(key, "missing table");
    for (const auto& [k, v] : *t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) == allowed.end()) {
        return unknown(k, fmt::format("{}.{}", key, k.str()), "unknown key", allowed);
      }
    }
    return t;
  }

  Result<double> number(const toml::table& t, std::string_view section, std::string_view key,
                        double min) const {
    auto v = t[key].value<double>();
    std::string full = fmt::format("{}.{}", section, key);
    if (!v) return error(full, "missing number");
    // Scenario numbers become durations in ms: a bound keeps their conversion defined.
    constexpr double kMax = 1e9;
    if (!std::isfinite(*v) || *v > kMax) return error(full, fmt::format("must be a number up to {}", kMax));
    if (*v < min) return error(full, fmt::format("must be at least {}", min));
    return *v;
  }

  Result<int> integer(const toml::table& t, std::string_view section, std::string_view key,
                      int min) const {
    auto v = t[key].value_exact<std::int64_t>();
    std::string full = fmt::format("{}.{}", section, key);
    if (!v) return error(full, "missing integer");
    if (*v < min) return error(full, fmt::format("must be at least {}", min));
    if (*v > INT_MAX) return error(full, fmt::format("must be at most {}", INT_MAX));
    return static_cast<int>(*v);
  }

  Result<TimeMs> clock(const toml::node* node, std::string_view full) const {
    auto text = node ? node->value<std::string>() : std::nullopt;
    if (!text) return error(full, "missing \"HH:MM\" time");
    auto t = parse_clock(*text);
    if (!t) return error(full, t.error().message);
    return *t;
  }

 private:
  tl::unexpected<Error> error_at(std::string_view where, std::string_view key, std::string_view what) const {
    return fail(Errc::config, fmt::format("{}: {}: {}; fix the scenario file (see "
                                          "shared/scenarios/ci-day.toml for the format)",
                                          where, key, what));
  }

  std::string source_;
};

#define KILN_TRY(var, expr)                          \
  auto var##_result = (expr);                        \
  if (!var##_result) return tl::unexpected(var##_result.error()); \
  auto var = *var##_result

}  // namespace

Result<TimeMs> parse_clock(std::string_view text) {
  int hours = 0;
  int minutes = 0;
  char colon = 0;
  std::istringstream in{std::string(text)};
  if (!(in >> hours >> colon >> minutes) || colon != ':' || hours < 0 || hours > 24 ||
      minutes < 0 || minutes > 59 || !in.eof()) {
    return fail(Errc::config, fmt::format("'{}' is not a time of day like \"07:00\"", text));
  }
  return hours * kHourMs + minutes * kMinuteMs;
}

Result<Scenario> parse_scenario_toml(std::string_view text, std::string_view source_name) {
  auto parsed = config::parse_toml(text, source_name, "fix the syntax");
  if (!parsed) return tl::unexpected(parsed.error());
  const toml::table& doc = *parsed;
  Reader r(source_name);
  Scenario s;

  KILN_TRY(pool, r.table(doc, "pool", {"revisions", "node_mtbf_hours", "node_repair_minutes"}));
  const toml::array* revisions = (*pool)["revisions"].as_array();
  if (!revisions || revisions->empty()) return r.error("pool.revisions", "missing list of revisions");
  for (const toml::node& node : *revisions) {
    const toml::table* rev = node.as_table();
    if (!rev) return r.error("pool.revisions", "each revision is { name, nodes, chips_per_node }");
    RevisionSpec spec;
    auto name = (*rev)["name"].value<std::string>();
    if (!name || name->empty()) return r.error("pool.revisions.name", "missing revision name");
    spec.name = *name;
    KILN_TRY(nodes, r.integer(*rev, "pool.revisions", "nodes", 1));
    KILN_TRY(chips, r.integer(*rev, "pool.revisions", "chips_per_node", 1));
    spec.nodes = nodes;
    spec.chips_per_node = chips;
    s.revisions.push_back(spec);
  }
  KILN_TRY(mtbf, r.number(*pool, "pool", "node_mtbf_hours", 0));
  KILN_TRY(repair, r.number(*pool, "pool", "node_repair_minutes", 0));
  s.node_mtbf_hours = mtbf;
  s.node_repair_ms = static_cast<DurationMs>(repair * kMinuteMs);

  KILN_TRY(changes, r.table(doc, "changes", {"per_day", "hardware_path", "workday_share", "layers", "workday"}));
  KILN_TRY(per_day, r.integer(*changes, "changes", "per_day", 0));
  KILN_TRY(hw, r.integer(*changes, "changes", "hardware_path", 0));
  KILN_TRY(share, r.number(*changes, "changes", "workday_share", 0));
  if (share > 1) return r.error("changes.workday_share", "must be between 0 and 1");
  s.changes_per_day = per_day;
  s.hardware_path_changes = hw;
  s.workday_share = share;
  if (const toml::array* workday = (*changes)["workday"].as_array()) {
    if (workday->size() != 2) return r.error("changes.workday", "expected [\"08:00\", \"20:00\"]");
    KILN_TRY(start, r.clock(workday->get(0), "changes.workday"));
    KILN_TRY(end, r.clock(workday->get(1), "changes.workday"));
    s.workday_start_ms = start;
    s.workday_end_ms = end;
  }

  KILN_TRY(pre, r.table(doc, "presubmit", {"models", "chips_per_model", "minutes_per_model", "target_p90_minutes"}));
  KILN_TRY(models, r.integer(*pre, "presubmit", "models", 1));
  KILN_TRY(pre_chips, r.integer(*pre, "presubmit", "chips_per_model", 1));
  KILN_TRY(pre_minutes, r.number(*pre, "presubmit", "minutes_per_model", 0.01));
  KILN_TRY(target, r.number(*pre, "presubmit", "target_p90_minutes", 0));
  s.presubmit_models = models;
  s.presubmit_chips_per_model = pre_chips;
  s.presubmit_duration_ms = static_cast<DurationMs>(pre_minutes * kMinuteMs);
  s.presubmit_target_p90_ms = static_cast<DurationMs>(target * kMinuteMs);

  const toml::table* nightly = doc["nightly"].as_table();
  if (!nightly) return r.error("nightly", "missing table");
  for (const auto& [k, v] : *nightly) {
    std::string key(k.str());
    if (key == "start") {
      KILN_TRY(t, r.clock(&v, "nightly.start"));
      s.nightly_start_ms = t;
    } else if (key == "deadline") {
      KILN_TRY(t, r.clock(&v, "nightly.deadline"));
      s.nightly_deadline_ms = t;
    } else if (const toml::table* tier = v.as_table()) {
      JobTier jt;
      jt.name = key;
      std::string section = "nightly." + key;
      KILN_TRY(count, r.integer(*tier, section, "count", 0));
      KILN_TRY(chips, r.integer(*tier, section, "chips", 1));
      KILN_TRY(minutes, r.number(*tier, section, "minutes", 0.01));
      jt.count = count;
      jt.chips = chips;
      jt.duration_ms = static_cast<DurationMs>(minutes * kMinuteMs);
      s.nightly_tiers.push_back(jt);
    } else {
      return r.unknown(k, "nightly." + key, "unknown key (nightly takes start, deadline and model tier tables)",
                       {"start", "deadline"});
    }
  }
  if (s.nightly_tiers.empty()) return r.error("nightly", "no model tiers { count, chips, minutes }");
  if (s.nightly_deadline_ms <= s.nightly_start_ms) {
    return r.error("nightly.deadline", "must be after nightly.start");
  }

  KILN_TRY(rel, r.table(doc, "release", {"start", "nodes_per_revision", "minutes"}));
  KILN_TRY(rel_start, r.clock((*rel).get("start"), "release.start"));
  KILN_TRY(rel_nodes, r.integer(*rel, "release", "nodes_per_revision", 0));
  KILN_TRY(rel_minutes, r.number(*rel, "release", "minutes", 0.01));
  s.release_start_ms = rel_start;
  s.release_nodes_per_revision = rel_nodes;
  s.release_duration_ms = static_cast<DurationMs>(rel_minutes * kMinuteMs);

  KILN_TRY(exp, r.table(doc, "experiments", {"window", "arrivals_per_hour", "sizes", "median_minutes", "sigma", "checkpoint_every_minutes", "grace_minutes"}));
  const toml::array* window = (*exp)["window"].as_array();
  if (!window || window->size() != 2) return r.error("experiments.window", "expected [\"09:00\", \"19:00\"]");
  KILN_TRY(w0, r.clock(window->get(0), "experiments.window"));
  KILN_TRY(w1, r.clock(window->get(1), "experiments.window"));
  s.experiment_window_start_ms = w0;
  s.experiment_window_end_ms = w1;
  KILN_TRY(rate, r.number(*exp, "experiments", "arrivals_per_hour", 0));
  s.experiment_arrivals_per_hour = rate;
  const toml::array* sizes = (*exp)["sizes"].as_array();
  if (!sizes || sizes->empty()) return r.error("experiments.sizes", "expected [{ chips, share }, ...]");
  double total_share = 0;
  for (const toml::node& node : *sizes) {
    const toml::table* size = node.as_table();
    if (!size) return r.error("experiments.sizes", "each size is { chips, share }");
    KILN_TRY(chips, r.integer(*size, "experiments.sizes", "chips", 1));
    KILN_TRY(size_share, r.number(*size, "experiments.sizes", "share", 0));
    s.experiment_sizes.push_back({chips, size_share});
    total_share += size_share;
  }
  if (total_share <= 0) return r.error("experiments.sizes", "shares must add up to more than 0");
  KILN_TRY(median, r.number(*exp, "experiments", "median_minutes", 0.01));
  KILN_TRY(sigma, r.number(*exp, "experiments", "sigma", 0));
  KILN_TRY(ckpt, r.number(*exp, "experiments", "checkpoint_every_minutes", 0));
  KILN_TRY(grace, r.number(*exp, "experiments", "grace_minutes", 0));
  s.experiment_median_minutes = median;
  s.experiment_sigma = sigma;
  s.experiment_checkpoint_ms = static_cast<DurationMs>(ckpt * kMinuteMs);
  s.experiment_grace_ms = static_cast<DurationMs>(grace * kMinuteMs);

  KILN_TRY(bis, r.table(doc, "bisect", {"candidate_changes", "chips_per_step", "minutes_per_step"}));
  KILN_TRY(cands, r.integer(*bis, "bisect", "candidate_changes", 1));
  KILN_TRY(bis_chips, r.integer(*bis, "bisect", "chips_per_step", 1));
  KILN_TRY(bis_minutes, r.number(*bis, "bisect", "minutes_per_step", 0.01));
  s.bisect_candidate_changes = cands;
  s.bisect_chips_per_step = bis_chips;
  s.bisect_step_ms = static_cast<DurationMs>(bis_minutes * kMinuteMs);

  if (doc.contains("unit")) {
    KILN_TRY(unit, r.table(doc, "unit", {"minutes", "reject_share"}));
    KILN_TRY(unit_minutes, r.number(*unit, "unit", "minutes", 0));
    KILN_TRY(reject, r.number(*unit, "unit", "reject_share", 0));
    if (reject > 1) return r.error("unit.reject_share", "must be a share from 0 to 1");
    s.unit_duration_ms = static_cast<DurationMs>(unit_minutes * kMinuteMs);
    s.unit_reject_share = reject;
  }

  static const std::vector<std::string_view> tables = {"pool",    "changes",     "presubmit", "nightly",
                                                       "release", "experiments", "bisect",    "unit"};
  for (const auto& [k, v] : doc) {
    if (std::find(tables.begin(), tables.end(), k.str()) == tables.end()) {
      return r.unknown(k, k.str(), "unknown table", tables);
    }
  }
  return s;
}

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return fail(Errc::io, fmt::format("cannot read scenario '{}'; pass an existing file with "
                                      "--scenario PATH",
                                      path));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_scenario_toml(text.str(), path);
}

}  // namespace kiln::fleet

#undef KILN_TRY
