// The backend dimension before silicon: the same qualification gates run on the simulated chip,
// the CPU reference and, once it exists, the real chip. A result's backend is the one recorded
// with it (a model run's node_backends: each node's driver when the result was made); a report
// from before that was recorded falls back to its nodes' drivers now. The switch-over report says, per model,
// revision and gate, on which backends the recorded runs measured it and whether it is calibrated
// on silicon (correctness: the golden confirmed by a correct run there; performance: the noise
// measured on enough silicon baseline samples) or still relies on the simulator, and what remains
// before switching over. Pure: run reports and nodes in, the report out.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"

namespace kiln::backends {

enum class Backend { sim, cpu, silicon };
constexpr EnumTable<Backend, 3> enum_names(Backend) {
  return {{{Backend::sim, "sim"}, {Backend::cpu, "cpu"}, {Backend::silicon, "silicon"}}};
}

// kiln's simulated chip reports "kiln-sim ...", its CPU reference "kiln-cpu ..."; any other
// driver is a real chip's.
Backend backend_of(std::string_view driver_version);

struct SwitchoverOptions {
  // Baseline samples on silicon before the noise of a model's performance gate counts as measured.
  std::size_t min_noise_samples = 20;
};

struct GateStatus {
  std::string model;
  std::string revision;
  std::string gate;  // "correctness" or "performance"
  // Evidence per backend: correct runs (correctness) or baseline samples (performance).
  std::map<Backend, std::size_t> evidence;
  bool calibrated = false;             // on silicon
  std::optional<double> silicon_noise; // performance: relative run-to-run noise on silicon
  std::string remaining;               // what to do before switching over; empty when calibrated
};

struct SwitchoverReport {
  std::vector<GateStatus> gates;  // by model, revision, gate
  std::size_t calibrated = 0;
  bool ready = false;  // every gate calibrated on silicon, and there is at least one
  std::vector<std::string> unknown_nodes;  // named by old runs, unknown to the coordinator now
  std::size_t runs_read = 0;
  // Model runs recorded without node_backends, attributed by their nodes' drivers now.
  std::size_t results_by_current_driver = 0;
};

// `runs`: run reports as the coordinator keeps them (docs/qualification.md); unfinished ones are
// skipped. `node_drivers`: node id -> its driver's version now (`kiln nodes`), read only for
// results recorded without their backend.
SwitchoverReport switchover_report(const std::vector<nlohmann::json>& runs,
                                   const std::map<std::string, std::string>& node_drivers,
                                   const SwitchoverOptions& options = {});

nlohmann::json to_json(const SwitchoverReport& report);
std::string to_text(const SwitchoverReport& report);

}  // namespace kiln::backends
