// The firmware install as a pure state machine: verify -> read every chip's slots -> flash
// the standby slot on every chip -> activate on every chip -> post-install health check ->
// keep, or roll every activated chip back to its previous slot. It performs no I/O: the shell
// (install.h) asks next_action(), does it with the driver, and reports the outcome with the
// time it happened. The state says at every moment whether the node may take work: never
// while any chip may run a half-installed stack, and never after a rollback that failed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/health/check_result.h"
#include "common/enum_names.h"
#include "common/error.h"
#include "common/time.h"

namespace kiln::agent::install {

enum class StepStatus { ok, failed, skipped };
constexpr EnumTable<StepStatus, 3> enum_names(StepStatus) {
  return {{
      {StepStatus::ok, "ok"},
      {StepStatus::failed, "failed"},
      {StepStatus::skipped, "skipped"},
  }};
}
inline std::string_view to_string(StepStatus value) { return enum_name(value); }

struct InstallStep {
  std::string step;  // verify, read_slots, flash, activate, health_check, rollback, run_installer
  std::optional<std::uint32_t> chip;
  StepStatus status = StepStatus::ok;
  std::string message;
  TimeMs at_ms = 0;  // wall clock, milliseconds since the epoch
};

enum class FirmwarePhase {
  verifying,      // checking the package digest
  reading_slots,  // reading every chip's slots and binding
  flashing,       // writing the standby slots; running firmware untouched
  activating,     // switching chips to the new image
  health_check,   // post-install level 1 diagnostics and probes
  rolling_back,   // returning activated chips to their previous slot
  // Final phases.
  kept,         // the new firmware runs on every chip and passed the health check
  unchanged,    // nothing was activated: the firmware that ran before still runs everywhere
  rolled_back,  // the new firmware was refused and every chip runs its previous image again
  quarantined,  // a rollback failed: chips may run mixed or broken firmware
};
constexpr EnumTable<FirmwarePhase, 10> enum_names(FirmwarePhase) {
  return {{
      {FirmwarePhase::verifying, "verifying"},
      {FirmwarePhase::reading_slots, "reading_slots"},
      {FirmwarePhase::flashing, "flashing"},
      {FirmwarePhase::activating, "activating"},
      {FirmwarePhase::health_check, "health_check"},
      {FirmwarePhase::rolling_back, "rolling_back"},
      {FirmwarePhase::kept, "kept"},
      {FirmwarePhase::unchanged, "unchanged"},
      {FirmwarePhase::rolled_back, "rolled_back"},
      {FirmwarePhase::quarantined, "quarantined"},
  }};
}
inline std::string_view to_string(FirmwarePhase value) { return enum_name(value); }
bool is_final(FirmwarePhase phase);
// Only kept, unchanged and rolled_back: the node runs one known firmware everywhere.
bool fit_for_work(FirmwarePhase phase);

struct FirmwareAction {
  enum class Kind { verify, read_slots, flash, activate, health_check, rollback, done };
  Kind kind = Kind::done;
  std::optional<std::uint32_t> chip;
};

// What the shell read from one chip before changing anything.
struct ChipFirmwareState {
  std::string active_version;
  std::optional<std::int64_t> bound_pid;  // a live workload holds the chip
};

class FirmwareInstall {
 public:
  FirmwareInstall(std::string version, std::uint32_t chip_count);

  FirmwarePhase phase() const { return phase_; }
  bool fit_for_work() const { return install::fit_for_work(phase_); }
  bool finished() const { return is_final(phase_); }
  // Why the install ended as it did (empty while it runs and when kept without remark).
  const std::string& reason() const { return reason_; }
  const std::vector<InstallStep>& steps() const { return steps_; }
  const std::string& version() const { return version_; }
  // The version each chip ran before the install (filled by on_slots_read).
  const std::vector<std::string>& previous_versions() const { return previous_versions_; }

  FirmwareAction next_action() const;

  void on_verified(const Status& result, TimeMs now_ms);
  void on_slots_read(std::uint32_t chip, const Result<ChipFirmwareState>& result, TimeMs now_ms);
  void on_flashed(std::uint32_t chip, const Status& result, TimeMs now_ms);
  // running_new_image: after a failed activation, whether the chip switched anyway (the shell
  // reads its slots), so it is rolled back with the others.
  void on_activated(std::uint32_t chip, const Status& result, bool running_new_image,
                    TimeMs now_ms);
  void on_health_checked(kiln::health::CheckStatus verdict, const std::string& summary, TimeMs now_ms);
  void on_rolled_back(std::uint32_t chip, const Status& result, TimeMs now_ms);

 private:
  void step(std::string name, std::optional<std::uint32_t> chip, StepStatus status,
            std::string message, TimeMs now_ms);
  void start_rollback(std::string why);
  void finish_rollback();
  std::string previous_summary() const;

  std::string version_;
  std::uint32_t chip_count_;
  FirmwarePhase phase_ = FirmwarePhase::verifying;
  std::uint32_t next_chip_ = 0;  // the chip the current phase works on next
  std::vector<std::string> previous_versions_;
  std::vector<std::uint32_t> activated_;  // chips that run (or may run) the new image
  std::size_t rollback_index_ = 0;
  std::string rollback_why_;
  std::vector<std::string> rollback_failures_;
  std::string reason_;
  std::vector<InstallStep> steps_;
};

}  // namespace kiln::agent::install
