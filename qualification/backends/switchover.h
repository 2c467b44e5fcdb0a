// The backend dimension before silicon: the same qualification gates run on the simulated chip,
// the CPU reference and, once it exists, the real chip. A result's backend is the one recorded
// with it (a model run's node_backends: what each node's driver declared when the result was
// made); a report from before that was recorded falls back to what its nodes' drivers declare now. The switch-over report says, per model,
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

// What a node's driver declares it drives: the node's backend=KIND label, which the agent sets
// from the driver's backend_kind (docs/driver-abi.md); none when the driver declares nothing. A
// driver's version string says nothing of it: a node counts as silicon only by its declaration.
std::optional<Backend> declared_backend(const std::vector<std::string>& labels);

struct SwitchoverOptions {
  // Baseline samples on silicon before the noise of a model's performance gate counts as measured.
  std::size_t min_noise_samples = 20;
  // The model set's models: readiness needs both gates of every one of them calibrated on every
  // revision, run or not. Without them readiness cannot be judged, and the report is not ready.
  std::optional<std::vector<std::string>> models;
  // Revisions the set must be calibrated on besides those the runs name (the fleet's).
  std::vector<std::string> revisions;
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
  bool never_run = false;              // a gate of the set that no recorded run measured
};

struct SwitchoverReport {
  std::vector<GateStatus> gates;  // by model, revision, gate
  std::size_t calibrated = 0;
  // Every gate of the model set calibrated on silicon (and there is at least one); false without
  // the set.
  bool ready = false;
  bool model_set_known = false;
  std::size_t never_run = 0;  // gates of the set no recorded run measured
  std::vector<std::string> unknown_nodes;  // named by old runs, unknown to the coordinator now
  std::size_t runs_read = 0;
  // Model runs recorded without node_backends, attributed by their nodes' drivers now.
  std::size_t results_by_current_driver = 0;
  // Baseline samples left out because an earlier result of the same seed had the very same ones
  // (a rerun of a deterministic measurement is not new evidence).
  std::size_t repeated_samples = 0;
};

// What a node's driver declares now (declared_backend of its labels); none: it declares nothing.
using NodeBackends = std::map<std::string, std::optional<Backend>>;

// `runs`: run reports as the coordinator keeps them (docs/qualification.md); unfinished ones are
// skipped. `nodes`: node id -> its driver's declared backend now (`kiln nodes`), read only for
// results recorded without their backend.
SwitchoverReport switchover_report(const std::vector<nlohmann::json>& runs, const NodeBackends& nodes,
                                   const SwitchoverOptions& options = {});

nlohmann::json to_json(const SwitchoverReport& report);
std::string to_text(const SwitchoverReport& report);

}  // namespace kiln::backends
