#include "agent/install/firmware_install.h"

#include <doctest/doctest.h>

namespace kiln::agent::install {
namespace {

using Kind = FirmwareAction::Kind;

Status failure(const std::string& message) { return tl::unexpected(Error{Errc::device, message}); }

ChipFirmwareState runs(const std::string& version) { return ChipFirmwareState{version, std::nullopt}; }

// Drives a machine through verify, slots (all on 1.0.0), flash and activate of every chip.
FirmwareInstall activated_machine(std::uint32_t chips) {
  FirmwareInstall machine("1.1.0", chips);
  machine.on_verified({}, 1);
  for (std::uint32_t chip = 0; chip < chips; ++chip) machine.on_slots_read(chip, runs("1.0.0"), 2);
  for (std::uint32_t chip = 0; chip < chips; ++chip) machine.on_flashed(chip, {}, 3);
  for (std::uint32_t chip = 0; chip < chips; ++chip) machine.on_activated(chip, {}, true, 4);
  return machine;
}

TEST_CASE("a clean install asks for each step in order and keeps the new firmware") {
  FirmwareInstall machine("1.1.0", 2);
  CHECK(machine.next_action().kind == Kind::verify);
  CHECK_FALSE(machine.fit_for_work());
  machine.on_verified({}, 10);
  CHECK(machine.next_action().kind == Kind::read_slots);
  CHECK(machine.next_action().chip == 0u);
  machine.on_slots_read(0, runs("1.0.0"), 11);
  CHECK(machine.next_action().chip == 1u);
  machine.on_slots_read(1, runs("1.0.0"), 12);
  CHECK(machine.next_action().kind == Kind::flash);
  machine.on_flashed(0, {}, 13);
  machine.on_flashed(1, {}, 14);
  CHECK(machine.next_action().kind == Kind::activate);
  machine.on_activated(0, {}, true, 15);
  // One chip runs the new image, the other the old: no work now.
  CHECK(machine.phase() == FirmwarePhase::activating);
  CHECK_FALSE(machine.fit_for_work());
  machine.on_activated(1, {}, true, 16);
  CHECK(machine.next_action().kind == Kind::health_check);
  CHECK_FALSE(machine.fit_for_work());
  machine.on_health_checked(health::CheckStatus::pass, "pass", 17);
  CHECK(machine.phase() == FirmwarePhase::kept);
  CHECK(machine.fit_for_work());
  CHECK(machine.next_action().kind == Kind::done);
  CHECK(machine.previous_versions() == std::vector<std::string>{"1.0.0", "1.0.0"});
  REQUIRE(machine.steps().size() == 8);
  CHECK(machine.steps().front().step == "verify");
  CHECK(machine.steps().front().at_ms == 10);
  CHECK(machine.steps().back().step == "health_check");
  CHECK(machine.steps().back().at_ms == 17);
}

TEST_CASE("a refused package ends before any chip is touched") {
  FirmwareInstall machine("1.1.0", 2);
  machine.on_verified(tl::unexpected(Error{Errc::integrity, "digest differs"}), 1);
  CHECK(machine.phase() == FirmwarePhase::unchanged);
  CHECK(machine.fit_for_work());
  CHECK(machine.next_action().kind == Kind::done);
  CHECK(machine.reason().find("digest differs") != std::string::npos);
}

TEST_CASE("a bound chip stops the install before anything changes") {
  FirmwareInstall machine("1.1.0", 2);
  machine.on_verified({}, 1);
  machine.on_slots_read(0, runs("1.0.0"), 2);
  machine.on_slots_read(1, ChipFirmwareState{"1.0.0", 4242}, 3);
  CHECK(machine.phase() == FirmwarePhase::unchanged);
  CHECK(machine.reason().find("pid 4242") != std::string::npos);
}

TEST_CASE("the version already running everywhere needs no flash") {
  FirmwareInstall machine("1.0.0", 2);
  machine.on_verified({}, 1);
  machine.on_slots_read(0, runs("1.0.0"), 2);
  machine.on_slots_read(1, runs("1.0.0"), 3);
  CHECK(machine.phase() == FirmwarePhase::kept);
  CHECK(machine.reason().find("already") != std::string::npos);
}

TEST_CASE("a failed flash leaves the running firmware alone and the node fit") {
  FirmwareInstall machine("1.1.0", 3);
  machine.on_verified({}, 1);
  for (std::uint32_t chip = 0; chip < 3; ++chip) machine.on_slots_read(chip, runs("1.0.0"), 2);
  machine.on_flashed(0, {}, 3);
  machine.on_flashed(1, failure("KILN_DRIVER_E_FIRMWARE: write failed"), 4);
  CHECK(machine.phase() == FirmwarePhase::unchanged);
  CHECK(machine.fit_for_work());
  CHECK(machine.reason().find("flashing chip 1 failed") != std::string::npos);
  CHECK(machine.reason().find("1.0.0 still runs on every chip") != std::string::npos);
}

TEST_CASE("a failed activation rolls back the chips already switched") {
  FirmwareInstall machine("1.1.0", 3);
  machine.on_verified({}, 1);
  for (std::uint32_t chip = 0; chip < 3; ++chip) machine.on_slots_read(chip, runs("1.0.0"), 2);
  for (std::uint32_t chip = 0; chip < 3; ++chip) machine.on_flashed(chip, {}, 3);
  machine.on_activated(0, {}, true, 4);
  machine.on_activated(1, failure("chip reset timed out"), true, 5);  // switched anyway
  CHECK(machine.phase() == FirmwarePhase::rolling_back);
  CHECK_FALSE(machine.fit_for_work());
  CHECK(machine.next_action().kind == Kind::rollback);
  CHECK(machine.next_action().chip == 0u);
  machine.on_rolled_back(0, {}, 6);
  CHECK(machine.next_action().chip == 1u);
  machine.on_rolled_back(1, {}, 7);
  CHECK(machine.phase() == FirmwarePhase::rolled_back);
  CHECK(machine.fit_for_work());
  CHECK(machine.reason().find("activating chip 1 failed") != std::string::npos);
}

TEST_CASE("a failed activation of the first chip needs no rollback") {
  FirmwareInstall machine("1.1.0", 2);
  machine.on_verified({}, 1);
  for (std::uint32_t chip = 0; chip < 2; ++chip) machine.on_slots_read(chip, runs("1.0.0"), 2);
  for (std::uint32_t chip = 0; chip < 2; ++chip) machine.on_flashed(chip, {}, 3);
  machine.on_activated(0, failure("standby slot invalid"), false, 4);
  CHECK(machine.phase() == FirmwarePhase::unchanged);
  CHECK(machine.fit_for_work());
}

TEST_CASE("a failed or impossible health check rolls every chip back") {
  for (auto verdict : {health::CheckStatus::fail, health::CheckStatus::skip}) {
    auto machine = activated_machine(2);
    machine.on_health_checked(verdict, "link [chip 1] link_down", 5);
    CHECK(machine.phase() == FirmwarePhase::rolling_back);
    machine.on_rolled_back(0, {}, 6);
    machine.on_rolled_back(1, {}, 7);
    CHECK(machine.phase() == FirmwarePhase::rolled_back);
    CHECK(machine.fit_for_work());
    CHECK(machine.reason().find("link_down") != std::string::npos);
    CHECK(machine.reason().find("rolled back 2 chips to their previous firmware (1.0.0)") !=
          std::string::npos);
  }
}

TEST_CASE("warnings keep the new firmware and say so") {
  auto machine = activated_machine(2);
  machine.on_health_checked(health::CheckStatus::warn, "warn: ecc", 5);
  CHECK(machine.phase() == FirmwarePhase::kept);
  CHECK(machine.reason().find("warnings") != std::string::npos);
}

TEST_CASE("a failed rollback quarantines the node, after trying every chip") {
  auto machine = activated_machine(3);
  machine.on_health_checked(health::CheckStatus::fail, "fail", 5);
  machine.on_rolled_back(0, {}, 6);
  machine.on_rolled_back(1, failure("KILN_DRIVER_E_STATE: no previous slot"), 7);
  CHECK(machine.next_action().kind == Kind::rollback);  // chip 2 still gets its rollback
  CHECK(machine.next_action().chip == 2u);
  machine.on_rolled_back(2, {}, 8);
  CHECK(machine.phase() == FirmwarePhase::quarantined);
  CHECK_FALSE(machine.fit_for_work());
  CHECK(machine.next_action().kind == Kind::done);
  CHECK(machine.reason().find("rollback failed on chip 1") != std::string::npos);
  CHECK(machine.reason().find("must not take work") != std::string::npos);
}

}  // namespace
}  // namespace kiln::agent::install
