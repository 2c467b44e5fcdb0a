#include "records/risk_register.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "common/config/toml_errors.h"

namespace kiln::qualification {

std::string_view gate_rule_text(GateMetric metric) {
  switch (metric) {
    case GateMetric::throughput:
      return "a confirmed regression of the run's performance gate (Mann-Whitney, Benjamini-Hochberg, confirmation "
             "rerun) fails it";
    case GateMetric::correctness:
      return "outputs outside the golden's tolerance on two nodes fail it";
    case GateMetric::eval:
      return "an eval below the model's eval_threshold x the reference fails it";
    case GateMetric::loss_curve:
      return "a loss curve outside the reference's band fails it";
  }
  return "";
}

const RiskTeam* RiskRegister::team(std::string_view name) const {
  auto it = std::find_if(teams.begin(), teams.end(), [&](const RiskTeam& t) { return t.name == name; });
  return it == teams.end() ? nullptr : &*it;
}

const Risk* RiskRegister::find(std::string_view id) const {
  auto it = std::find_if(risks.begin(), risks.end(), [&](const Risk& r) { return r.id == id; });
  return it == risks.end() ? nullptr : &*it;
}

std::vector<const Risk*> RiskRegister::risks_of_gate(std::string_view model, GateMetric metric) const {
  std::vector<const Risk*> out;
  for (const Risk& risk : risks) {
    if (risk.gate && risk.gate->model == model && risk.gate->metric == enum_name(metric)) out.push_back(&risk);
  }
  return out;
}

namespace {

template <class E>
std::vector<std::string_view> names_of() {
  std::vector<std::string_view> names;
  for (const auto& entry : enum_names(E{})) names.push_back(entry.second);
  return names;
}

// One table's values, each problem recorded where it stands.
class Reader {
 public:
  Reader(config::Problems& problems, const toml::table& table, std::string place)
      : problems_(problems), table_(table), place_(std::move(place)) {}

  std::optional<std::string> text(std::string_view key, bool required) {
    const toml::node* node = table_.get(key);
    if (node == nullptr) {
      if (required) problems_.at(table_.source(), fmt::format("{} needs {} (a string)", place_, key));
      return std::nullopt;
    }
    const auto value = node->value<std::string>();
    if (!value || value->empty()) {
      problems_.at(node->source(), fmt::format("{} of {} must be a non-empty string", key, place_));
      return std::nullopt;
    }
    return *value;
  }

  // A value of E's names; an unknown one is named with the nearest.
  template <class E>
  std::optional<E> choice(std::string_view key, bool required) {
    auto name = text(key, required);
    if (!name) return std::nullopt;
    if (auto value = enum_from_name<E>(*name)) return value;
    const auto known = names_of<E>();
    const auto near = config::nearest_name(*name, known);
    problems_.at(table_.get(key)->source(),
                 fmt::format("{} '{}' of {} is not one of {}{}", key, *name, place_, fmt::join(known, ", "),
                             near ? fmt::format("; did you mean '{}'?", *near) : ""));
    return std::nullopt;
  }

 private:
  config::Problems& problems_;
  const toml::table& table_;
  std::string place_;
};

const std::vector<std::string_view> kTopKeys = {"model_set", "team", "risk"};
const std::vector<std::string_view> kTeamKeys = {"name", "approvers"};
const std::vector<std::string_view> kRiskKeys = {"id", "title", "owner_team", "layer", "tier", "gate", "page",
                                                 "period_days"};
const std::vector<std::string_view> kGateKeys = {"model", "metric"};
const std::vector<std::string_view> kPageKeys = {"team", "severity"};

const toml::array* tables_of(config::Problems& problems, const toml::table& root, std::string_view key) {
  const toml::node* node = root.get(key);
  if (node == nullptr) return nullptr;
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    problems.at(node->source(), fmt::format("{} must be an array of tables ([[{}]])", key, key));
    return nullptr;
  }
  return array;
}

void read_teams(config::Problems& problems, const toml::table& root, RiskRegister& reg) {
  const toml::array* teams = tables_of(problems, root, "team");
  if (teams == nullptr) return;
  for (const auto& entry : *teams) {
    const toml::table& table = *entry.as_table();
    problems.unknown_keys(table, "[[team]]", kTeamKeys);
    RiskTeam team;
    Reader r(problems, table, "[[team]]");
    team.name = r.text("name", true).value_or("");
    const toml::node* approvers = table.get("approvers");
    const toml::array* list = approvers != nullptr ? approvers->as_array() : nullptr;
    if (list == nullptr || list->empty()) {
      problems.at(approvers != nullptr ? approvers->source() : table.source(),
                  fmt::format("team '{}' needs approvers: the key names that may waive its failing gates", team.name));
    } else {
      for (const auto& approver : *list) {
        const auto name = approver.value<std::string>();
        if (!name || name->empty()) {
          problems.at(approver.source(), "every approver must be a key name (a non-empty string)");
        } else {
          team.approvers.push_back(*name);
        }
      }
    }
    if (!team.name.empty() && reg.team(team.name) != nullptr) {
      problems.at(table.source(), fmt::format("team '{}' is declared twice; declare each team once", team.name));
    }
    reg.teams.push_back(std::move(team));
  }
}

std::optional<RiskGate> read_gate(config::Problems& problems, const toml::node& node, const std::string& place) {
  const toml::table* table = node.as_table();
  if (table == nullptr) {
    problems.at(node.source(), fmt::format("gate of {} must be a table: {{ model = \"...\", metric = \"...\" }}", place));
    return std::nullopt;
  }
  problems.unknown_keys(*table, "a gate", kGateKeys);
  Reader r(problems, *table, place + "'s gate");
  auto model = r.text("model", true);
  auto metric = r.text("metric", true);
  if (!model || !metric) return std::nullopt;
  return RiskGate{*model, *metric};
}

void read_risks(config::Problems& problems, const toml::table& root, RiskRegister& reg) {
  const toml::array* risks = tables_of(problems, root, "risk");
  if (risks == nullptr) {
    problems.add("no [[risk]] tables; the register lists the release risks and their gates");
    return;
  }
  std::vector<std::string_view> team_names;
  for (const RiskTeam& team : reg.teams) team_names.push_back(team.name);
  std::set<std::string> ids;
  for (const auto& entry : *risks) {
    const toml::table& table = *entry.as_table();
    problems.unknown_keys(table, "[[risk]]", kRiskKeys);
    Risk risk;
    Reader first(problems, table, "[[risk]]");
    risk.id = first.text("id", true).value_or("");
    const std::string place = fmt::format("risk '{}'", risk.id);
    if (!risk.id.empty() && !ids.insert(risk.id).second) {
      problems.at(table.source(), fmt::format("{} is declared twice; risk ids must be unique", place));
    }
    Reader r(problems, table, place);
    risk.title = r.text("title", true).value_or("");
    // A risk without an owner loads, and is reported as a gap; a misspelt one is an error here.
    if (auto owner = r.text("owner_team", false)) {
      risk.owner_team = *owner;
      if (reg.team(*owner) == nullptr) {
        const auto near = config::nearest_name(*owner, team_names);
        problems.at(table.get("owner_team")->source(),
                    fmt::format("{}: owner_team '{}' is not a declared [[team]]{}", place, *owner,
                                near ? fmt::format("; did you mean '{}'?", *near)
                                     : "; declare it with its approvers"));
      }
    }
    if (auto layer = r.choice<RiskLayer>("layer", true)) risk.layer = *layer;
    if (auto tier = r.choice<RiskTier>("tier", true)) risk.tier = *tier;
    if (const toml::node* gate = table.get("gate")) risk.gate = read_gate(problems, *gate, place);
    if (const toml::node* page = table.get("page"); page == nullptr || page->as_table() == nullptr) {
      problems.at(page != nullptr ? page->source() : table.source(),
                  fmt::format("{} needs page = {{ team = \"...\", severity = \"sev1..sev4\" }}: who is paged when "
                              "its gate fails",
                              place));
    } else {
      problems.unknown_keys(*page->as_table(), "a page", kPageKeys);
      Reader p(problems, *page->as_table(), place + "'s page");
      risk.page.team = p.text("team", true).value_or("");
      if (auto severity = p.choice<Severity>("severity", true)) risk.page.severity = *severity;
    }
    if (const toml::node* period = table.get("period_days")) {
      const auto days = period->value_exact<std::int64_t>();
      if (!days || *days < 1 || *days > 365) {
        problems.at(period->source(), fmt::format("period_days of {} must be a whole number of days, 1 to 365", place));
      } else if (risk.tier != RiskTier::stability) {
        problems.at(period->source(), fmt::format("{}: period_days is for stability risks only; the other tiers' "
                                                  "periods are their runs'",
                                                  place));
      } else {
        risk.period_days = static_cast<std::uint32_t>(*days);
      }
    }
    reg.risks.push_back(std::move(risk));
  }
}

}  // namespace

Result<RiskRegister> parse_risk_register(std::string_view toml_text, std::string_view source) {
  auto root = config::parse_toml(toml_text, source, "fix the risk register");
  if (!root) return tl::unexpected(root.error());
  config::Problems problems{std::string(source)};
  problems.unknown_keys(*root, "the risk register", kTopKeys);
  RiskRegister reg;
  reg.source = std::string(source);
  reg.text = std::string(toml_text);
  if (auto set = Reader(problems, *root, "the risk register").text("model_set", true)) reg.model_set = *set;
  read_teams(problems, *root, reg);
  read_risks(problems, *root, reg);
  if (auto ok = problems.status(); !ok) return tl::unexpected(ok.error());
  return reg;
}

Result<RiskRegister> load_risk_register_file(const std::filesystem::path& path) {
  auto text = config::read_text_file(path.string(), "the risk register", "check the path (docs/risks.md)");
  if (!text) return tl::unexpected(text.error());
  auto reg = parse_risk_register(*text, path.string());
  if (!reg) return reg;
  if (reg->model_set.is_relative()) reg->model_set = std::filesystem::absolute(path).parent_path() / reg->model_set;
  return reg;
}

}  // namespace kiln::qualification
