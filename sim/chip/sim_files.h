// The simulated node's files: its options (inline or a node TOML), its fault file, and the
// state directory that stands in for what real hardware keeps across restarts (firmware
// slots, bindings, faults). Written with atomic rename under a lock file so the agent, a
// workload process and kiln-sim-chip can share one node.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "sim/chip/model.h"

namespace kiln::sim {

struct SimOptions {
  NodeIdentity identity{"sim-node", Revision::a, 8, 1};
  std::filesystem::path state_dir;  // required
  std::optional<std::filesystem::path> fault_file;
  std::string firmware_version = "1.0.0";  // both slots of a fresh node
  // How fast telemetry follows load; shared knob of every process using the node.
  DurationMs thermal_time_constant_ms = 3000;
  // 0: self-tests return at once; 1: they take their reported duration.
  double self_test_time_scale = 0.0;
};

inline constexpr std::uint32_t kMaxChipCount = 64;

// Either a path to a sim node TOML, or inline "key=value;key=value". Inline options may name
// a TOML with config=PATH; the inline keys then override it. Relative paths inside a TOML are
// resolved from the TOML's folder.
Result<SimOptions> parse_sim_options(std::string_view options);
// The TOML form from the file's text; `path` names the file in errors and is the base of
// relative paths.
Result<SimOptions> parse_sim_options_toml(std::string_view text, const std::filesystem::path& path);

struct FileFault {
  std::uint32_t chip = 0;
  Fault fault;
};

struct FaultFile {
  std::vector<FileFault> faults;
  std::string digest;  // of the file's bytes, so an unchanged file is applied only once
};

// [[fault]] tables with chip, kind, and optional factor and mode.
Result<FaultFile> read_fault_file(const std::filesystem::path& path, TimeMs now);
// The same from the file's bytes; `path` names the file in errors.
Result<FaultFile> parse_fault_file(std::string_view bytes, const std::filesystem::path& path, TimeMs now);

// not_found when the directory holds no node yet.
Result<NodeState> read_node_state(const std::filesystem::path& state_dir);
// The state file's text; `file` names it in errors.
Result<NodeState> parse_node_state(std::string_view bytes, const std::filesystem::path& file);
Status write_node_state(const std::filesystem::path& state_dir, const NodeState& state);

// An exclusive advisory lock on the state directory for read-modify-write.
class StateLock {
 public:
  static Result<StateLock> acquire(const std::filesystem::path& state_dir);
  StateLock(StateLock&& other) noexcept;
  StateLock& operator=(StateLock&&) = delete;
  StateLock(const StateLock&) = delete;
  ~StateLock();

 private:
  explicit StateLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kiln::sim
