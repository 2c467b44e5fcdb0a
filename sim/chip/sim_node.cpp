#include "sim/chip/sim_node.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

namespace kiln::sim {
namespace {

namespace fs = std::filesystem;

bool process_alive(std::int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // A zombie has exited but still answers kill(0); it holds no chips any more.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return true;
  return line[close_paren + 2] != 'Z';
}

std::string chip_name(std::uint32_t chip) { return "chip " + std::to_string(chip); }

Status refuse_if_bound(const ChipState& chip, std::string_view operation) {
  if (chip.bound_pid == 0) return {};
  return fail(Errc::unavailable, "cannot " + std::string(operation) + " " + chip_name(chip.index) +
                                     ": it is bound to running process " +
                                     std::to_string(chip.bound_pid) +
                                     "; stop or unbind that workload first");
}

// `what` names the version in errors: "firmware" or "driver".
Status check_version_text(std::string_view what, const std::string& version) {
  if (version.empty() || version.size() >= 64) {
    return fail(Errc::invalid_argument,
                std::string(what) + " version must be 1 to 63 characters; got '" + version + "'");
  }
  for (unsigned char c : version) {
    if (c < 0x21 || c > 0x7E) {
      return fail(Errc::invalid_argument, std::string(what) + " version '" + version +
                                              "' has spaces or control characters; use a "
                                              "plain version string such as 2.1.0");
    }
  }
  return {};
}

Status check_image(const fs::path& image) {
  std::error_code ec;
  if (!fs::is_regular_file(image, ec)) {
    return fail(Errc::io, "firmware image '" + image.string() +
                              "' does not exist or is not a file; give the unpacked image path");
  }
  if (fs::file_size(image, ec) == 0 || ec) {
    return fail(Errc::invalid_argument,
                "firmware image '" + image.string() + "' is empty; the package is damaged");
  }
  std::ifstream in(image, std::ios::binary);
  if (!in) {
    return fail(Errc::io, "cannot read firmware image '" + image.string() +
                              "'; check its permissions");
  }
  return {};
}

bool same_identity(const NodeIdentity& a, const NodeIdentity& b) {
  return a.node_id == b.node_id && a.revision == b.revision && a.chip_count == b.chip_count &&
         a.seed == b.seed;
}

std::string describe(const NodeIdentity& id) {
  return "node_id=" + id.node_id + " hardware_revision=" + std::string(to_string(id.revision)) +
         " chip_count=" + std::to_string(id.chip_count) + " seed=" + std::to_string(id.seed);
}

// Replaces the fault-file faults with the file's current content.
void apply_fault_file(NodeState& node, const FaultFile& file) {
  for (ChipState& chip : node.chips) {
    std::erase_if(chip.faults, [](const Fault& f) { return f.from_fault_file; });
  }
  for (const FileFault& entry : file.faults) {
    auto& faults = node.chips[entry.chip].faults;
    std::erase_if(faults, [&](const Fault& f) { return f.kind == entry.fault.kind; });
    faults.push_back(entry.fault);
  }
  node.fault_file_digest = file.digest;
}

}  // namespace

SimEnvironment system_environment() {
  SimEnvironment env;
  env.now_ms = [] {
    return static_cast<TimeMs>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
  };
  env.pid_alive = process_alive;
  env.hang_forever = [](std::uint32_t) {
    // A wedged chip never answers; only killing the caller's process ends the call.
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  };
  return env;
}

Result<SimNode> SimNode::open(std::string_view text, SimEnvironment env) {
  auto options = parse_sim_options(text);
  if (!options) return tl::unexpected(options.error());
  const fs::path& dir = options->state_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return fail(Errc::io, "cannot create sim state directory '" + dir.string() +
                              "': " + ec.message() + "; choose a writable folder for state_dir");
  }
  std::optional<FaultFile> fault_file;
  const TimeMs now = env.now_ms();
  if (options->fault_file) {
    auto file = read_fault_file(*options->fault_file, now);
    if (!file) return tl::unexpected(file.error());
    for (const FileFault& f : file->faults) {
      if (f.chip >= options->identity.chip_count) {
        return fail(Errc::config, "sim fault file '" + options->fault_file->string() +
                                      "' names chip " + std::to_string(f.chip) +
                                      " but the node has " +
                                      std::to_string(options->identity.chip_count) +
                                      " chips (0 to " +
                                      std::to_string(options->identity.chip_count - 1) + ")");
      }
    }
    fault_file = std::move(*file);
  }

  auto lock = StateLock::acquire(dir);
  if (!lock) return tl::unexpected(lock.error());
  auto state = read_node_state(dir);
  bool dirty = false;
  if (!state) {
    if (state.error().code != Errc::not_found) return tl::unexpected(state.error());
    state = initial_node_state(options->identity, options->firmware_version, now);
    dirty = true;
  } else if (!same_identity(state->identity, options->identity)) {
    return fail(Errc::config, "sim state directory '" + dir.string() + "' holds a node with " +
                                  describe(state->identity) + " but the options say " +
                                  describe(options->identity) +
                                  "; use a fresh state_dir or make the options match");
  }
  if (fault_file && fault_file->digest != state->fault_file_digest) {
    apply_fault_file(*state, *fault_file);
    dirty = true;
  } else if (!fault_file && !state->fault_file_digest.empty()) {
    apply_fault_file(*state, FaultFile{});
    state->fault_file_digest.clear();
    dirty = true;
  }
  if (dirty) {
    if (auto ok = write_node_state(dir, *state); !ok) return tl::unexpected(ok.error());
  }
  return SimNode(std::move(*options), std::move(env));
}

Result<SimNode> SimNode::attach(const fs::path& state_dir, SimEnvironment env) {
  const fs::path dir = fs::absolute(state_dir);
  auto state = read_node_state(dir);
  if (!state) return tl::unexpected(state.error());
  SimOptions options;
  options.identity = state->identity;
  options.state_dir = dir;
  return SimNode(std::move(options), std::move(env));
}

Status SimNode::check_chip(std::uint32_t chip) const {
  if (chip < chip_count()) return {};
  return fail(Errc::not_found, "chip " + std::to_string(chip) + " does not exist; this node has " +
                                   std::to_string(chip_count()) + " chips (0 to " +
                                   std::to_string(chip_count() - 1) + ")");
}

bool SimNode::refresh_load(NodeState& node, TimeMs now) const {
  bool changed = false;
  for (ChipState& chip : node.chips) {
    if (chip.bound_pid != 0 && !env_.pid_alive(chip.bound_pid)) {
      chip.bound_pid = 0;  // the workload exited without unbinding
      changed = true;
    }
    const bool loaded = chip.bound_pid != 0;
    if (chip.load.loaded != loaded) {
      record_load(chip, loaded, now, options_.thermal_time_constant_ms);
      changed = true;
    }
  }
  return changed;
}

Status SimNode::modify(const std::function<Status(NodeState&)>& change) {
  auto lock = StateLock::acquire(options_.state_dir);
  if (!lock) return tl::unexpected(lock.error());
  auto state = read_node_state(options_.state_dir);
  if (!state) return tl::unexpected(state.error());
  refresh_load(*state, env_.now_ms());
  // Written even when the change fails: a failed flash still leaves its slot invalid.
  Status result = change(*state);
  if (auto ok = write_node_state(options_.state_dir, *state); !ok) return ok;
  return result;
}

Result<NodeState> SimNode::touch(std::uint32_t chip) {
  if (auto ok = check_chip(chip); !ok) return tl::unexpected(ok.error());
  auto state = read_node_state(options_.state_dir);
  if (!state) return tl::unexpected(state.error());
  if (state->chips[chip].fault(FaultKind::hang) != nullptr) env_.hang_forever(chip);
  NodeState probe = *state;
  if (refresh_load(probe, env_.now_ms())) {
    NodeState refreshed;
    auto ok = modify([&](NodeState& node) {
      refreshed = node;
      return Status{};
    });
    if (!ok) return tl::unexpected(ok.error());
    return refreshed;
  }
  return state;
}

Result<ChipIdentity> SimNode::identity(std::uint32_t chip) {
  auto state = touch(chip);
  if (!state) return tl::unexpected(state.error());
  return chip_identity(*state, chip);
}

Result<Telemetry> SimNode::telemetry(std::uint32_t chip) {
  auto state = touch(chip);
  if (!state) return tl::unexpected(state.error());
  return chip_telemetry(*state, chip, env_.now_ms(), options_.thermal_time_constant_ms);
}

Status SimNode::reset(std::uint32_t chip) {
  if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  return modify([&](NodeState& node) -> Status {
    ChipState& c = node.chips[chip];
    if (auto ok = refuse_if_bound(c, "reset"); !ok) return ok;
    reset_chip(c, env_.now_ms());
    return {};
  });
}

Result<ChipState> SimNode::firmware(std::uint32_t chip) {
  auto state = touch(chip);
  if (!state) return tl::unexpected(state.error());
  return state->chips[chip];
}

Status SimNode::flash_standby(std::uint32_t chip, const fs::path& image,
                              const std::string& version) {
  if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  if (auto ok = check_version_text("firmware", version); !ok) return ok;
  if (auto ok = check_image(image); !ok) return ok;
  return modify([&](NodeState& node) { return sim::flash_standby(node.chips[chip], version); });
}

Status SimNode::activate_standby(std::uint32_t chip) {
  if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  return modify([&](NodeState& node) -> Status {
    ChipState& c = node.chips[chip];
    if (auto ok = refuse_if_bound(c, "activate firmware on"); !ok) return ok;
    return sim::activate_standby(c, env_.now_ms());
  });
}

Status SimNode::rollback_firmware(std::uint32_t chip) {
  if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  return modify([&](NodeState& node) -> Status {
    ChipState& c = node.chips[chip];
    if (auto ok = refuse_if_bound(c, "roll back firmware on"); !ok) return ok;
    return sim::rollback_firmware(c, env_.now_ms());
  });
}

Status SimNode::bind(std::int64_t pid, const std::vector<std::uint32_t>& chips) {
  if (pid <= 0) {
    return fail(Errc::invalid_argument,
                "cannot bind pid " + std::to_string(pid) + ": give a running process's id");
  }
  if (chips.empty()) {
    return fail(Errc::invalid_argument, "cannot bind pid " + std::to_string(pid) +
                                            " to no chips; give at least one chip index");
  }
  std::set<std::uint32_t> unique;
  for (std::uint32_t chip : chips) {
    if (auto ok = check_chip(chip); !ok) return ok;
    if (!unique.insert(chip).second) {
      return fail(Errc::invalid_argument,
                  "chip " + std::to_string(chip) + " is listed twice in the binding; list it once");
    }
  }
  if (!env_.pid_alive(pid)) {
    return fail(Errc::invalid_argument, "cannot bind pid " + std::to_string(pid) +
                                            ": no such running process; start the workload "
                                            "before binding it");
  }
  for (std::uint32_t chip : chips) {
    if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  }
  return modify([&](NodeState& node) -> Status {
    for (std::uint32_t chip : chips) {
      const ChipState& c = node.chips[chip];
      if (c.bound_pid != 0 && c.bound_pid != pid) {
        return fail(Errc::unavailable, "cannot bind pid " + std::to_string(pid) + " to " +
                                           chip_name(chip) + ": it is bound to running process " +
                                           std::to_string(c.bound_pid) +
                                           "; wait for it or unbind it first");
      }
    }
    const TimeMs now = env_.now_ms();
    for (std::uint32_t chip : chips) {
      node.chips[chip].bound_pid = pid;
      record_load(node.chips[chip], true, now, options_.thermal_time_constant_ms);
    }
    return {};
  });
}

Status SimNode::unbind(std::int64_t pid) {
  if (pid <= 0) {
    return fail(Errc::invalid_argument, "cannot unbind pid " + std::to_string(pid) +
                                            ": give the id the workload was bound with");
  }
  auto state = read_node_state(options_.state_dir);
  if (!state) return tl::unexpected(state.error());
  for (const ChipState& chip : state->chips) {
    if (chip.bound_pid == pid && chip.fault(FaultKind::hang) != nullptr) {
      env_.hang_forever(chip.index);
    }
  }
  return modify([&](NodeState& node) -> Status {
    const TimeMs now = env_.now_ms();
    for (ChipState& chip : node.chips) {
      if (chip.bound_pid != pid) continue;
      chip.bound_pid = 0;
      record_load(chip, false, now, options_.thermal_time_constant_ms);
    }
    return {};
  });
}

Result<std::int64_t> SimNode::binding(std::uint32_t chip) {
  auto state = touch(chip);
  if (!state) return tl::unexpected(state.error());
  return state->chips[chip].bound_pid;
}

Result<SelfTest> SimNode::self_test(std::uint32_t chip, SelfTestKind kind, std::uint32_t level) {
  if (level < 1 || level > 3) {
    return fail(Errc::invalid_argument, "self-test level " + std::to_string(level) +
                                            " is unknown; use 1 (quick), 2 or 3 (stress)");
  }
  if (auto state = touch(chip); !state) return tl::unexpected(state.error());
  SelfTest result;
  auto ok = modify([&](NodeState& node) -> Status {
    ChipState& c = node.chips[chip];
    if (auto free = refuse_if_bound(c, "run a self-test on"); !free) return free;
    result = run_self_test(node, chip, kind, level);
    ++c.self_test_runs;
    return {};
  });
  if (!ok) return tl::unexpected(ok.error());
  if (options_.self_test_time_scale > 0.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(
        static_cast<std::int64_t>(result.duration_s * 1000.0 * options_.self_test_time_scale)));
  }
  return result;
}

Status SimNode::inject_fault(std::uint32_t chip, FaultKind kind, double factor,
                             FlashFailMode mode) {
  if (auto ok = check_chip(chip); !ok) return ok;
  auto fault = make_fault(kind, factor, mode, env_.now_ms(), false);
  if (!fault) return tl::unexpected(fault.error());
  return modify([&](NodeState& node) -> Status {
    auto& faults = node.chips[chip].faults;
    std::erase_if(faults, [&](const Fault& f) { return f.kind == kind; });
    faults.push_back(*fault);
    return {};
  });
}

Status SimNode::clear_faults(std::optional<std::uint32_t> chip) {
  if (chip) {
    if (auto ok = check_chip(*chip); !ok) return ok;
  }
  return modify([&](NodeState& node) -> Status {
    for (ChipState& c : node.chips) {
      if (!chip || c.index == *chip) c.faults.clear();
    }
    return {};
  });
}

Result<ChipConditions> SimNode::conditions(std::uint32_t chip) const {
  if (auto ok = check_chip(chip); !ok) return tl::unexpected(ok.error());
  auto state = read_node_state(options_.state_dir);
  if (!state) return tl::unexpected(state.error());
  return chip_conditions(*state, chip);
}

Result<NodeState> SimNode::snapshot() const { return read_node_state(options_.state_dir); }

Result<std::string> SimNode::driver_version() const {
  auto state = read_node_state(options_.state_dir);
  if (!state) return tl::unexpected(state.error());
  return state->driver_version;
}

Status SimNode::set_driver_version(const std::string& version) {
  if (auto ok = check_version_text("driver", version); !ok) return ok;
  return modify([&](NodeState& node) -> Status {
    node.driver_version = version;
    return {};
  });
}

}  // namespace kiln::sim
