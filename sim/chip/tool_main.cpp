// kiln-sim-chip: inject, clear and show simulated chip faults in a sim node's state
// directory, while the agent and workloads run; and record an installed driver's version, which
// is what a driver installer for the sim does.
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "drivers/backend_support.h"
#include "sim/chip/sim_node.h"
#include "common/version.h"

namespace {

using kiln::sim::SimNode;

int report(const kiln::Status& status) {
  if (status) return 0;
  std::cerr << "kiln-sim-chip: " << status.error().describe() << "\n";
  return 1;
}

std::string describe_fault(const kiln::sim::Fault& fault) {
  std::string out(kiln::sim::to_string(fault.kind));
  if (fault.kind == kiln::sim::FaultKind::slow || fault.kind == kiln::sim::FaultKind::sdc) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "(factor=%g)", fault.factor);
    out += factor;
  }
  if (fault.kind == kiln::sim::FaultKind::flash_fail) {
    out += "(mode=" + std::string(kiln::sim::to_string(fault.flash_mode)) + ")";
  }
  if (fault.from_fault_file) out += "[file]";
  return out;
}

// Marks an image that cannot be activated or that fails once active.
std::string slot_marks(const kiln::sim::FirmwareSlotState& slot) {
  if (!slot.valid) return "!invalid";
  return slot.faulty ? "!faulty" : "";
}

kiln::Status show(const SimNode& node) {
  auto state = node.snapshot();
  if (!state) return tl::unexpected(state.error());
  const auto& id = state->identity;
  std::cout << "node " << id.node_id << " revision " << kiln::sim::to_string(id.revision)
            << " chips " << id.chip_count << " seed " << id.seed << "\n";
  for (const auto& chip : state->chips) {
    const auto c = kiln::sim::chip_conditions(*state, chip.index);
    std::cout << "chip " << chip.index << ": firmware " << c.firmware_version << " (slot "
              << kiln::sim::to_string(chip.active) << "; a=" << chip.slot(kiln::sim::Slot::a).version
              << slot_marks(chip.slot(kiln::sim::Slot::a))
              << " b=" << chip.slot(kiln::sim::Slot::b).version
              << slot_marks(chip.slot(kiln::sim::Slot::b)) << "; previous "
              << (chip.previous ? std::string(kiln::sim::to_string(*chip.previous)) : "none")
              << ") bound_pid " << chip.bound_pid << " speed_factor " << c.speed_factor
              << " faults:";
    if (chip.faults.empty()) std::cout << " none";
    for (const auto& fault : chip.faults) std::cout << " " << describe_fault(fault);
    std::cout << "\n";
  }
  return {};
}

// The state directory named by sim driver options (an agent's [driver] options, which a driver
// installer finds in KILN_DRIVER_OPTIONS).
kiln::Result<std::string> state_dir_of(const std::string& driver_options) {
  auto sim_options = kiln::drivers::backend::take_kernel_options(driver_options);
  if (!sim_options) return tl::unexpected(sim_options.error());
  auto parsed = kiln::sim::parse_sim_options(sim_options->rest);
  if (!parsed) return tl::unexpected(parsed.error());
  return parsed->state_dir.string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inject, clear and show faults of simulated kiln chips; set their driver's version"};
  app.set_version_flag("--version", kiln::version_text("kiln-sim-chip"));
  app.require_subcommand(1);
  std::string state_dir;
  std::optional<std::uint32_t> chip;
  std::string fault;
  double factor = 0.0;
  std::string mode;

  auto* inject = app.add_subcommand("inject", "inject a fault on one chip");
  inject->add_option("--state-dir", state_dir, "the sim node's state directory")->required();
  inject->add_option("--chip", chip, "chip index")->required();
  inject->add_option("--fault", fault,
                     "ecc_storm, thermal_throttle, hang, link_down, slow, sdc, flash_fail, nan_loss, "
                     "loss_spike, throughput_decay")
      ->required();
  inject->add_option("--factor", factor,
                     "slow: speed factor in (0,1], default 0.5; sdc: corruption rate, "
                     "default 0.01; loss_spike: loss multiplier in (1,1000], default 10; "
                     "throughput_decay: fraction lost per hour in (0,1], default 0.5");
  inject->add_option("--mode", mode, "flash_fail: flash (default) or activate");

  auto* clear = app.add_subcommand("clear", "clear the faults of one chip, or of all chips");
  clear->add_option("--state-dir", state_dir, "the sim node's state directory")->required();
  clear->add_option("--chip", chip, "chip index; all chips when omitted");

  auto* show_command = app.add_subcommand("show", "show chips, firmware, bindings and faults");
  show_command->add_option("--state-dir", state_dir, "the sim node's state directory")
      ->required();

  std::string driver_options;
  std::string driver_version;
  auto* set_driver = app.add_subcommand(
      "set-driver-version", "record VERSION as the installed driver's version: what a driver installer for the sim does");
  set_driver->add_option("VERSION", driver_version, "the driver's version from now on")->required();
  auto* set_driver_state = set_driver->add_option("--state-dir", state_dir, "the sim node's state directory");
  set_driver->add_option("--driver-options", driver_options,
                         "or the sim driver's options (an installer's KILN_DRIVER_OPTIONS), which name it")
      ->excludes(set_driver_state);

  CLI11_PARSE(app, argc, argv);

  if (set_driver->parsed() && state_dir.empty()) {
    if (driver_options.empty()) {
      std::cerr << "kiln-sim-chip: set-driver-version needs the node: pass --state-dir DIR or --driver-options "
                   "OPTIONS\n";
      return 1;
    }
    auto named = state_dir_of(driver_options);
    if (!named) return report(tl::unexpected(named.error()));
    state_dir = *named;
  }

  auto node = SimNode::attach(state_dir);
  if (!node) return report(tl::unexpected(node.error()));
  if (inject->parsed()) {
    auto kind = kiln::sim::parse_fault_kind(fault);
    if (!kind) return report(tl::unexpected(kind.error()));
    auto flash_mode = kiln::sim::parse_flash_fail_mode(mode);
    if (!flash_mode) return report(tl::unexpected(flash_mode.error()));
    return report(node->inject_fault(*chip, *kind, factor, *flash_mode));
  }
  if (clear->parsed()) return report(node->clear_faults(chip));
  if (set_driver->parsed()) return report(node->set_driver_version(driver_version));
  return report(show(*node));
}
