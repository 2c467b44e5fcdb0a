#include "agent/install/install.h"

#include <sys/stat.h>

#include <chrono>
#include <sstream>

#include <doctest/doctest.h>

#include "tests/support/driver_support.h"
#include "tests/support/health_support.h"
#include "tests/support/text.h"

namespace kiln::agent::install {
namespace {

using testing::SimNodeFixture;
using testing::TempDir;

using kiln::testing::read_file;

std::string digest_of(const std::string& path) {
  auto digest = sha256_file(path, kDefaultPackageSizeLimitBytes);
  REQUIRE(digest);
  return *digest;
}

std::string write_script(const TempDir& dir, const std::string& name, const std::string& body) {
  const auto path = dir.write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

InstallOptions options_for(SimNodeFixture& node) {
  InstallOptions options;
  options.staging_dir = node.dir().file("staging");
  options.diag = node.diag_options();
  return options;
}

HealthCheck level1(SimNodeFixture& node, const InstallOptions& options) {
  return [&node, &options]() { return health::run_diagnostics(node.config(), 1, options.diag); };
}

std::vector<std::string> active_versions(drivers::Driver& driver) {
  std::vector<std::string> out;
  const auto count = driver.chip_count().value();
  for (std::uint32_t chip = 0; chip < count; ++chip) {
    out.push_back(driver.firmware_slots(chip).value().active_version());
  }
  return out;
}

const InstallStep* find_step(const InstallReport& report, const std::string& step,
                             std::optional<std::uint32_t> chip = std::nullopt) {
  for (const auto& s : report.steps) {
    if (s.step == step && s.chip == chip) return &s;
  }
  return nullptr;
}

TEST_CASE("sha256 of a file matches the published test vector") {
  TempDir dir;
  CHECK(digest_of(dir.write("abc", "abc")) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(digest_of(dir.write("empty", "")) ==
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("verification refuses tampered, missing, oversized and badly described packages") {
  TempDir dir;
  const auto path = dir.write("fw.bin", "firmware image 1.1.0");
  PackageEntry entry{PackageKind::firmware, "1.1.0", path, digest_of(path)};
  CHECK(verify_package(entry, kDefaultPackageSizeLimitBytes));
  entry.sha256[0] = static_cast<char>(std::toupper(entry.sha256[0]));  // hex case does not matter
  CHECK(verify_package(entry, kDefaultPackageSizeLimitBytes));

  dir.write("fw.bin", "firmware image 1.1.0 with a backdoor");
  auto tampered = verify_package(entry, kDefaultPackageSizeLimitBytes);
  REQUIRE_FALSE(tampered);
  CHECK(tampered.error().code == Errc::integrity);
  CHECK(tampered.error().message.find(path) != std::string::npos);
  CHECK(tampered.error().message.find("tampered") != std::string::npos);

  CHECK(verify_package(entry, 10).error().code == Errc::too_large);
  entry.path = dir.file("missing.bin");
  CHECK(verify_package(entry, kDefaultPackageSizeLimitBytes).error().code == Errc::not_found);
  entry.path = path;
  entry.sha256 = "abc";
  CHECK(verify_package(entry, kDefaultPackageSizeLimitBytes).error().code ==
        Errc::invalid_argument);
  entry.sha256 = std::string(64, 'a');
  entry.version = "1.1.0; rm -rf /";
  CHECK(verify_package(entry, kDefaultPackageSizeLimitBytes).error().code ==
        Errc::invalid_argument);
}

TEST_CASE("staging copies exactly the verified bytes, owner-only") {
  TempDir dir;
  const auto path = dir.write("installer.run", "#!/bin/sh\nexit 0\n");
  const PackageEntry entry{PackageKind::driver, "2.0", path, digest_of(path)};
  auto staged = stage_package(entry, dir.file("staging"), kDefaultPackageSizeLimitBytes);
  REQUIRE(staged);
  CHECK(read_file(*staged) == read_file(path));
  struct stat info {};
  REQUIRE(::stat(staged->c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);

  const PackageEntry wrong{PackageKind::driver, "2.0", path, std::string(64, '0')};
  auto refused = stage_package(wrong, dir.file("staging2"), kDefaultPackageSizeLimitBytes);
  REQUIRE_FALSE(refused);
  CHECK(std::filesystem::is_empty(dir.file("staging2")));
}

TEST_CASE("a firmware install flashes, activates, checks and keeps the new version") {
  SimNodeFixture node(2);
  const auto image = node.dir().write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  const auto options = options_for(node);
  const auto report = install_firmware(node.driver(), entry, options, level1(node, options));
  CHECK_MESSAGE(report.outcome == InstallOutcome::installed, report.reason);
  CHECK(report.fit_for_work);
  CHECK(active_versions(node.driver()) == std::vector<std::string>{"1.1.0", "1.1.0"});
  CHECK(report.previous_versions == std::vector<std::string>{"1.0.0", "1.0.0"});
  for (const char* step : {"flash", "activate"}) {
    for (std::uint32_t chip = 0; chip < 2; ++chip) {
      const auto* s = find_step(report, step, chip);
      REQUIRE(s != nullptr);
      CHECK(s->status == StepStatus::ok);
      CHECK(s->at_ms >= report.started_at_ms);
    }
  }
  CHECK(find_step(report, "health_check")->status == StepStatus::ok);
  CHECK_FALSE(report.health_results.empty());
  // The previous image stays as the rollback target.
  CHECK(node.driver().firmware_slots(0).value().previous.has_value());
  CHECK_FALSE(std::filesystem::exists(options.staging_dir + "/firmware-" +
                                      entry.sha256.substr(0, 16)));

  const auto again = install_firmware(node.driver(), entry, options, level1(node, options));
  CHECK(again.outcome == InstallOutcome::already_installed);
}

TEST_CASE("a backend without firmware refuses a firmware install, saying why and what to do") {
  TempDir dir;
  auto cpu = drivers::Driver::load(drivers::testing::cpu_library(), "");
  REQUIRE(cpu);
  const auto image = dir.write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  InstallOptions options;
  options.staging_dir = dir.file("staging");
  bool health_ran = false;
  const auto report = install_firmware(**cpu, entry, options, [&]() {
    health_ran = true;
    return Result<kiln::health::DiagReport>(kiln::health::DiagReport{});
  });
  CHECK(report.outcome == InstallOutcome::refused);
  CHECK(report.fit_for_work);
  CHECK(report.reason.find("declares no firmware installs") != std::string::npos);
  CHECK(report.reason.find("install firmware 1.1.0 on a node whose chips have firmware") != std::string::npos);
  REQUIRE(report.steps.size() == 1);
  CHECK(report.steps[0].step == "capabilities");
  CHECK_FALSE(health_ran);
}

TEST_CASE("a tampered firmware package is refused before any chip is touched") {
  SimNodeFixture node(2);
  const auto image = node.dir().write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  node.dir().write("fw-1.1.0.bin", "firmware 1.1.0 patched by someone");
  bool health_ran = false;
  const auto options = options_for(node);
  const auto report = install_firmware(node.driver(), entry, options, [&]() {
    health_ran = true;
    return Result<kiln::health::DiagReport>(kiln::health::DiagReport{});
  });
  CHECK(report.outcome == InstallOutcome::refused);
  CHECK(report.fit_for_work);
  CHECK(report.reason.find("does not match its bundle") != std::string::npos);
  REQUIRE(report.steps.size() == 1);
  CHECK(report.steps[0].step == "verify");
  CHECK(report.steps[0].status == StepStatus::failed);
  CHECK_FALSE(health_ran);
  const auto slots = node.driver().firmware_slots(0).value();
  CHECK(slots.version_a == "1.0.0");
  CHECK(slots.version_b == "1.0.0");
}

TEST_CASE("a failed flash leaves every chip on its firmware and says why") {
  SimNodeFixture node(2);
  node.inject(1, "flash_fail", 0, "flash");
  const auto image = node.dir().write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  const auto options = options_for(node);
  const auto report = install_firmware(node.driver(), entry, options, level1(node, options));
  CHECK(report.outcome == InstallOutcome::not_installed);
  CHECK(report.fit_for_work);
  CHECK(report.reason.find("flashing chip 1 failed") != std::string::npos);
  CHECK(report.reason.find("KILN_DRIVER_E_FIRMWARE") != std::string::npos);
  CHECK(find_step(report, "flash", 1u)->status == StepStatus::failed);
  CHECK(find_step(report, "activate", 0u) == nullptr);
  CHECK(active_versions(node.driver()) == std::vector<std::string>{"1.0.0", "1.0.0"});
}

TEST_CASE("a bad image fails the post-install check and every chip is rolled back") {
  SimNodeFixture node(2);
  node.inject(1, "flash_fail", 0, "activate");
  const auto image = node.dir().write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  const auto options = options_for(node);
  const auto report = install_firmware(node.driver(), entry, options, level1(node, options));
  CHECK_MESSAGE(report.outcome == InstallOutcome::rolled_back, report.reason);
  CHECK(report.fit_for_work);
  CHECK(report.reason.find("post-install health check failed") != std::string::npos);
  CHECK(report.reason.find("link [chip 1] link_down") != std::string::npos);
  CHECK(find_step(report, "health_check")->status == StepStatus::failed);
  CHECK(find_step(report, "rollback", 0u)->status == StepStatus::ok);
  CHECK(find_step(report, "rollback", 1u)->status == StepStatus::ok);
  CHECK(active_versions(node.driver()) == std::vector<std::string>{"1.0.0", "1.0.0"});
  CHECK(node.driver().chip_telemetry(1).value().link_up);

  const auto json = format_install_json(report);
  CHECK(json.find("\"outcome\": \"rolled_back\"") != std::string::npos);
  CHECK(json.find("\"step\": \"rollback\"") != std::string::npos);
}

TEST_CASE("a chip bound to a workload stops a firmware install before it starts") {
  SimNodeFixture node(2);
  REQUIRE(node.driver().bind_workload(static_cast<std::int64_t>(::getpid()), {1}));
  const auto image = node.dir().write("fw-1.1.0.bin", "firmware 1.1.0");
  const PackageEntry entry{PackageKind::firmware, "1.1.0", image, digest_of(image)};
  const auto options = options_for(node);
  const auto report = install_firmware(node.driver(), entry, options, level1(node, options));
  CHECK(report.outcome == InstallOutcome::not_installed);
  CHECK(report.reason.find("drain the node") != std::string::npos);
  CHECK(active_versions(node.driver()) == std::vector<std::string>{"1.0.0", "1.0.0"});
}

TEST_CASE("a driver installer runs by argv, without a shell, and its exit is reported") {
  SimNodeFixture node(1);
  const auto marker = node.dir().file("installer-args");
  const auto script = write_script(
      node.dir(), "driver-2.0.run",
      "for arg in \"$@\"; do echo \"arg:$arg\"; done > '" + marker + "'\n"
      "echo \"version:$KILN_PACKAGE_VERSION\" >> '" + marker + "'\n"
      "echo installing driver\n");
  const PackageEntry entry{PackageKind::driver, "2.0", script, digest_of(script)};
  auto options = options_for(node);
  options.installer_args = {"--silent", "a b; touch " + node.dir().file("pwned")};
  const auto report = install_driver(entry, options, level1(node, options));
  CHECK_MESSAGE(report.outcome == InstallOutcome::installed, report.reason);
  CHECK(report.fit_for_work);
  CHECK(report.installer_exit_code == 0);
  CHECK(report.installer_output.find("installing driver") != std::string::npos);
  CHECK(read_file(marker) == "arg:--silent\narg:a b; touch " + node.dir().file("pwned") +
                                 "\nversion:2.0\n");
  CHECK_FALSE(std::filesystem::exists(node.dir().file("pwned")));
  CHECK(find_step(report, "health_check")->status == StepStatus::ok);
}

TEST_CASE("a driver installer finds the node in KILN_DRIVER_OPTIONS; the sim's records the version it installs") {
  SimNodeFixture node(1);
  CHECK(node.driver().driver_version().value() == "kiln-sim 0.1.0");
  const auto script = write_script(node.dir(), "driver-2.0.run",
                                   "exec '" + std::string(KILN_BIN_DIR) +
                                       "/kiln-sim-chip' set-driver-version --driver-options "
                                       "\"$KILN_DRIVER_OPTIONS\" \"$KILN_PACKAGE_VERSION\"\n");
  const PackageEntry entry{PackageKind::driver, "2.0", script, digest_of(script)};
  auto options = options_for(node);
  options.driver_options = node.options();
  const auto report = install_driver(entry, options, level1(node, options));
  CHECK_MESSAGE(report.outcome == InstallOutcome::installed, report.reason << report.installer_output);
  // A driver loaded afresh, as the health check and the agent's next start load it.
  auto reloaded = drivers::Driver::load(agent::testing::sim_library(), node.options());
  REQUIRE(reloaded);
  CHECK((*reloaded)->driver_version().value() == "2.0");
}

TEST_CASE("a tampered driver installer never runs") {
  SimNodeFixture node(1);
  const auto marker = node.dir().file("ran");
  const auto script = write_script(node.dir(), "driver.run", "touch '" + marker + "'\n");
  const PackageEntry entry{PackageKind::driver, "2.0", script, digest_of(script)};
  write_script(node.dir(), "driver.run", "touch '" + marker + "'\necho evil\n");
  auto options = options_for(node);
  const auto report = install_driver(entry, options, level1(node, options));
  CHECK(report.outcome == InstallOutcome::refused);
  CHECK(report.fit_for_work);
  CHECK_FALSE(report.installer_exit_code.has_value());
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE("a failing or overrunning driver installer quarantines the node") {
  SimNodeFixture node(1);
  auto options = options_for(node);
  SUBCASE("non-zero exit") {
    const auto script = write_script(node.dir(), "bad.run", "echo 'missing kernel headers' >&2\nexit 3\n");
    const auto report = install_driver({PackageKind::driver, "2.0", script, digest_of(script)},
                                       options, level1(node, options));
    CHECK(report.outcome == InstallOutcome::quarantined);
    CHECK_FALSE(report.fit_for_work);
    CHECK(report.installer_exit_code == 3);
    CHECK(report.installer_output.find("missing kernel headers") != std::string::npos);
    CHECK(report.reason.find("half-installed") != std::string::npos);
  }
  SUBCASE("deadline") {
    options.installer_timeout_ms = 300;
    options.installer_kill_grace_ms = 200;
    const auto script = write_script(node.dir(), "slow.run", "sleep 30\n");
    const auto started = std::chrono::steady_clock::now();
    const auto report = install_driver({PackageKind::driver, "2.0", script, digest_of(script)},
                                       options, level1(node, options));
    CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
    CHECK(report.outcome == InstallOutcome::quarantined);
    CHECK_FALSE(report.fit_for_work);
    CHECK_FALSE(report.installer_exit_code.has_value());
    CHECK(find_step(report, "run_installer")->status == StepStatus::failed);
  }
}

TEST_CASE("the install command: exit 0 installed, 1 refused, 2 quarantined") {
  SimNodeFixture node(2);
  node.dir().write("health-targets.toml", "expected_chip_count = 2\n");
  const auto image = node.dir().write("fw-1.2.0.bin", "firmware 1.2.0");
  std::ostringstream out;
  std::ostringstream err;
  CHECK(run_install_command(node.config(), image, "firmware", "1.2.0", digest_of(image), true, out,
                            err) == 0);
  CHECK(out.str().find("\"outcome\": \"installed\"") != std::string::npos);
  CHECK(out.str().find("\"node\": \"n07\"") != std::string::npos);

  std::ostringstream refused;
  CHECK(run_install_command(node.config(), image, "firmware", "1.3.0", std::string(64, 'f'),
                            false, refused, err) == 1);
  CHECK(refused.str().find("refused") != std::string::npos);
  CHECK(run_install_command(node.config(), image, "bios", "1.3.0", std::string(64, 'f'), false,
                            out, err) == 1);
  CHECK(err.str().find("unknown package kind 'bios'") != std::string::npos);

  const auto script = write_script(node.dir(), "bad.run", "exit 1\n");
  std::ostringstream quarantined;
  CHECK(run_install_command(node.config(), script, "driver", "2.0", digest_of(script), false,
                            quarantined, err) == 2);
  CHECK(quarantined.str().find("NODE UNFIT FOR WORK") != std::string::npos);
}

}  // namespace
}  // namespace kiln::agent::install
