#include "agent/install/firmware_install.h"

#include <set>

namespace kiln::agent::install {
namespace {

std::string chip_name(std::uint32_t chip) { return "chip " + std::to_string(chip); }

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

}  // namespace

bool is_final(FirmwarePhase phase) {
  return phase == FirmwarePhase::kept || phase == FirmwarePhase::unchanged ||
         phase == FirmwarePhase::rolled_back || phase == FirmwarePhase::quarantined;
}

bool fit_for_work(FirmwarePhase phase) {
  return phase == FirmwarePhase::kept || phase == FirmwarePhase::unchanged ||
         phase == FirmwarePhase::rolled_back;
}

FirmwareInstall::FirmwareInstall(std::string version, std::uint32_t chip_count)
    : version_(std::move(version)), chip_count_(chip_count) {
  KILN_ASSERT(chip_count_ > 0, "the shell refuses a node without chips before installing");
}

FirmwareAction FirmwareInstall::next_action() const {
  using Kind = FirmwareAction::Kind;
  switch (phase_) {
    case FirmwarePhase::verifying: return {Kind::verify, std::nullopt};
    case FirmwarePhase::reading_slots: return {Kind::read_slots, next_chip_};
    case FirmwarePhase::flashing: return {Kind::flash, next_chip_};
    case FirmwarePhase::activating: return {Kind::activate, next_chip_};
    case FirmwarePhase::health_check: return {Kind::health_check, std::nullopt};
    case FirmwarePhase::rolling_back: return {Kind::rollback, activated_[rollback_index_]};
    default: return {Kind::done, std::nullopt};
  }
}

void FirmwareInstall::step(std::string name, std::optional<std::uint32_t> chip,
                           StepStatus status, std::string message, TimeMs now_ms) {
  steps_.push_back(InstallStep{std::move(name), chip, status, std::move(message), now_ms});
}

std::string FirmwareInstall::previous_summary() const {
  std::set<std::string> distinct(previous_versions_.begin(), previous_versions_.end());
  return join(std::vector<std::string>(distinct.begin(), distinct.end()), ", ");
}

void FirmwareInstall::on_verified(const Status& result, TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::verifying, "verification reports once, first");
  if (!result) {
    step("verify", std::nullopt, StepStatus::failed, result.error().describe(), now_ms);
    reason_ = "package refused before anything ran: " + result.error().message;
    phase_ = FirmwarePhase::unchanged;
    return;
  }
  step("verify", std::nullopt, StepStatus::ok, "SHA-256 matches the bundle", now_ms);
  phase_ = FirmwarePhase::reading_slots;
  next_chip_ = 0;
}

void FirmwareInstall::on_slots_read(std::uint32_t chip, const Result<ChipFirmwareState>& result,
                                    TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::reading_slots && chip == next_chip_,
              "slots are read chip by chip as next_action() asks");
  if (!result) {
    step("read_slots", chip, StepStatus::failed, result.error().describe(), now_ms);
    reason_ = "cannot read " + chip_name(chip) + "'s firmware slots (" + result.error().message +
              "); nothing was changed";
    phase_ = FirmwarePhase::unchanged;
    return;
  }
  if (result->bound_pid) {
    step("read_slots", chip, StepStatus::failed,
         "bound to workload pid " + std::to_string(*result->bound_pid), now_ms);
    reason_ = chip_name(chip) + " is bound to workload pid " +
              std::to_string(*result->bound_pid) +
              "; drain the node before installing firmware. Nothing was changed";
    phase_ = FirmwarePhase::unchanged;
    return;
  }
  previous_versions_.push_back(result->active_version);
  step("read_slots", chip, StepStatus::ok, "runs firmware " + result->active_version, now_ms);
  if (++next_chip_ < chip_count_) return;

  bool all_current = true;
  for (const auto& previous : previous_versions_) all_current = all_current && previous == version_;
  if (all_current) {
    step("flash", std::nullopt, StepStatus::skipped,
         "every chip already runs firmware " + version_, now_ms);
    reason_ = "firmware " + version_ + " already runs on every chip; nothing to do";
    phase_ = FirmwarePhase::kept;
    return;
  }
  phase_ = FirmwarePhase::flashing;
  next_chip_ = 0;
}

void FirmwareInstall::on_flashed(std::uint32_t chip, const Status& result, TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::flashing && chip == next_chip_,
              "chips are flashed one by one as next_action() asks");
  if (!result) {
    step("flash", chip, StepStatus::failed, result.error().describe(), now_ms);
    reason_ = "flashing " + chip_name(chip) + " failed: " + result.error().message +
              ". No chip was activated: firmware " + previous_summary() +
              " still runs on every chip";
    phase_ = FirmwarePhase::unchanged;
    return;
  }
  step("flash", chip, StepStatus::ok, "standby slot holds firmware " + version_, now_ms);
  if (++next_chip_ < chip_count_) return;
  phase_ = FirmwarePhase::activating;
  next_chip_ = 0;
}

void FirmwareInstall::on_activated(std::uint32_t chip, const Status& result,
                                   bool running_new_image, TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::activating && chip == next_chip_,
              "chips are activated one by one as next_action() asks");
  if (result) {
    activated_.push_back(chip);
    step("activate", chip, StepStatus::ok, "runs firmware " + version_, now_ms);
    if (++next_chip_ < chip_count_) return;
    phase_ = FirmwarePhase::health_check;
    return;
  }
  if (running_new_image) activated_.push_back(chip);
  step("activate", chip, StepStatus::failed,
       result.error().describe() + (running_new_image ? " (the chip switched anyway)" : ""),
       now_ms);
  const std::string why = "activating " + chip_name(chip) + " failed: " + result.error().message;
  if (activated_.empty()) {
    reason_ = why + ". No chip runs the new image: firmware " + previous_summary() +
              " still runs on every chip";
    phase_ = FirmwarePhase::unchanged;
    return;
  }
  start_rollback(why);
}

void FirmwareInstall::on_health_checked(kiln::health::CheckStatus verdict, const std::string& summary,
                                        TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::health_check, "the health check runs after activation");
  if (verdict == kiln::health::CheckStatus::pass || verdict == kiln::health::CheckStatus::warn) {
    step("health_check", std::nullopt, StepStatus::ok, summary, now_ms);
    reason_ = verdict == kiln::health::CheckStatus::warn
                  ? "kept firmware " + version_ + " with health warnings: " + summary
                  : "";
    phase_ = FirmwarePhase::kept;
    return;
  }
  step("health_check", std::nullopt, StepStatus::failed, summary, now_ms);
  // A check that could not judge the chips (skip) cannot vouch for the new image either.
  start_rollback("the post-install health check " +
                     std::string(verdict == kiln::health::CheckStatus::fail ? "failed" : "could not run") +
                     ": " + summary);
}

void FirmwareInstall::start_rollback(std::string why) {
  rollback_why_ = std::move(why);
  rollback_index_ = 0;
  phase_ = FirmwarePhase::rolling_back;
}

void FirmwareInstall::on_rolled_back(std::uint32_t chip, const Status& result, TimeMs now_ms) {
  KILN_ASSERT(phase_ == FirmwarePhase::rolling_back && chip == activated_[rollback_index_],
              "activated chips are rolled back one by one as next_action() asks");
  if (result) {
    step("rollback", chip, StepStatus::ok,
         "back on firmware " + (chip < previous_versions_.size() ? previous_versions_[chip] : ""),
         now_ms);
  } else {
    step("rollback", chip, StepStatus::failed, result.error().describe(), now_ms);
    rollback_failures_.push_back(chip_name(chip) + " (" + result.error().message + ")");
  }
  // Every activated chip gets its rollback even after one failed: the fewer chips left on the
  // refused image, the less the lab has to repair.
  if (++rollback_index_ < activated_.size()) return;
  finish_rollback();
}

void FirmwareInstall::finish_rollback() {
  if (rollback_failures_.empty()) {
    reason_ = rollback_why_ + "; rolled back " + std::to_string(activated_.size()) +
              " chips to their previous firmware (" + previous_summary() + ")";
    phase_ = FirmwarePhase::rolled_back;
    return;
  }
  reason_ = rollback_why_ + "; rollback failed on " + join(rollback_failures_, ", ") +
            ". The node may run mixed or broken firmware and must not take work: reflash a "
            "known-good image with kiln-agent install --kind firmware, or drain the node for the "
            "lab";
  phase_ = FirmwarePhase::quarantined;
}

}  // namespace kiln::agent::install
