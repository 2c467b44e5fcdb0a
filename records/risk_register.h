// The risk register (risks.toml, kept with the qualification set): the release risks the
// compiler, kernel, runtime, firmware and hardware teams name, each turned into an automated gate
// of the qualification runs. A risk says who owns it, which layer it comes from, the gate that
// covers it (a model of the set and a metric, judged by that metric's rule in every run of its
// tier), the tier, and who is paged, with what severity, when the gate fails. A team lists the
// approvers who may waive its failing gates (waiver.h). docs/risks.md describes the file:
//
//   model_set = "qualification-set.toml"   # the set the gates name, relative to this file
//
//   [[team]]
//   name = "compiler"
//   approvers = ["alice", "bob"]           # key names of the coordinator's [[keys]]
//
//   [[risk]]
//   id = "compiler-fp8-fusion"
//   title = "fp8 GEMM fusion changes numerics"
//   owner_team = "compiler"
//   layer = "compiler"                     # compiler | kernels | runtime | driver | firmware | hardware | framework
//   tier = "nightly"                       # presubmit | nightly | release | stability
//   gate = { model = "transformer-block-fp8-medium-01", metric = "correctness" }
//   page = { team = "compiler-oncall", severity = "sev2" }
//   period_days = 7                        # stability only: how often its run must come round
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "common/error.h"

namespace kiln::qualification {

// Where a risk comes from: the stack's layers and the chip itself.
enum class RiskLayer { framework, compiler, kernels, runtime, driver, firmware, hardware };
constexpr EnumTable<RiskLayer, 7> enum_names(RiskLayer) {
  return {{
      {RiskLayer::framework, "framework"},
      {RiskLayer::compiler, "compiler"},
      {RiskLayer::kernels, "kernels"},
      {RiskLayer::runtime, "runtime"},
      {RiskLayer::driver, "driver"},
      {RiskLayer::firmware, "firmware"},
      {RiskLayer::hardware, "hardware"},
  }};
}

// The runs a gate is judged in, and so how fresh its verdict must be (risk_status.h).
enum class RiskTier { presubmit, nightly, release, stability };
constexpr EnumTable<RiskTier, 4> enum_names(RiskTier) {
  return {{
      {RiskTier::presubmit, "presubmit"},
      {RiskTier::nightly, "nightly"},
      {RiskTier::release, "release"},
      {RiskTier::stability, "stability"},
  }};
}

// What a gate judges of its model's run. Each has one rule, the one the runs already apply:
// throughput the run's performance gate (a confirmed regression under Benjamini-Hochberg),
// correctness the golden comparison within the dtype's tolerance, eval the model's eval_threshold,
// loss_curve the training band.
enum class GateMetric { throughput, correctness, eval, loss_curve };
constexpr EnumTable<GateMetric, 4> enum_names(GateMetric) {
  return {{
      {GateMetric::throughput, "throughput"},
      {GateMetric::correctness, "correctness"},
      {GateMetric::eval, "eval"},
      {GateMetric::loss_curve, "loss_curve"},
  }};
}
// The rule of a metric, for people: "confirmed regression of the run's performance gate ...".
std::string_view gate_rule_text(GateMetric metric);

enum class Severity { sev1, sev2, sev3, sev4 };
constexpr EnumTable<Severity, 4> enum_names(Severity) {
  return {{
      {Severity::sev1, "sev1"},
      {Severity::sev2, "sev2"},
      {Severity::sev3, "sev3"},
      {Severity::sev4, "sev4"},
  }};
}

struct RiskTeam {
  std::string name;
  std::vector<std::string> approvers;  // key names that may waive the team's failing gates
};

// A gate names its model and metric as written: one naming a model the set lacks or a metric
// kiln does not judge is a gap of the register (risk_status.h), not a load error, so that the
// rest of the register is still reported.
struct RiskGate {
  std::string model;
  std::string metric;
};

struct RiskPage {
  std::string team;  // the ticket's team: the sinks route it as every ticket (ticket.h)
  Severity severity = Severity::sev3;
};

struct Risk {
  std::string id;
  std::string title;
  std::string owner_team;  // empty: a gap
  RiskLayer layer = RiskLayer::kernels;
  RiskTier tier = RiskTier::nightly;
  std::optional<RiskGate> gate;  // absent: a gap
  RiskPage page;
  std::uint32_t period_days = 7;  // stability: its run must have come round within this
};

struct RiskRegister {
  std::filesystem::path model_set;  // absolute once loaded from a file
  // Where it was read from and its text as read: the coordinator hands them to `kiln waive`.
  std::string source;
  std::string text;
  std::vector<RiskTeam> teams;
  std::vector<Risk> risks;

  const RiskTeam* team(std::string_view name) const;
  const Risk* find(std::string_view id) const;
  // The risks whose gate judges this model and metric.
  std::vector<const Risk*> risks_of_gate(std::string_view model, GateMetric metric) const;
};

// Every problem at once (Errc::config, one a line, "file:line:column: what", unknown keys and
// values with "did you mean"): ids unique, layer, tier and severity known, an owner_team and a
// page team that are declared [[team]]s, approvers non-empty key names, period_days 1 to 365.
Result<RiskRegister> parse_risk_register(std::string_view toml_text, std::string_view source);
// Reads the file; model_set is made absolute against the file's directory.
Result<RiskRegister> load_risk_register_file(const std::filesystem::path& path);

// Where the checked-in register lives, relative to the repository root.
inline constexpr std::string_view kRiskRegisterPath = "qualification/data/risks.toml";

}  // namespace kiln::qualification
