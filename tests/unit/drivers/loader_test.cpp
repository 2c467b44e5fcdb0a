#include "drivers/loader.h"

#include <set>

#include <doctest/doctest.h>

#include "tests/support/driver_support.h"

namespace kiln::drivers {
namespace {

using testing::TempDir;

TEST_CASE("the loader opens the sim backend and reports its chips") {
  TempDir dir;
  auto driver = Driver::load(testing::sim_library(), testing::fast_options(dir));
  REQUIRE_MESSAGE(driver, (driver ? "" : driver.error().describe()));
  auto& d = **driver;

  auto version = d.driver_version();
  REQUIRE(version);
  CHECK(version->find("kiln-sim") != std::string::npos);

  auto count = d.chip_count();
  REQUIRE(count);
  CHECK(*count == 8);

  std::set<std::string> serials;
  std::set<std::string> buses;
  for (std::uint32_t chip = 0; chip < *count; ++chip) {
    auto id = d.chip_identity(chip);
    REQUIRE(id);
    CHECK(id->index == chip);
    CHECK(id->hardware_revision == "a");
    CHECK(id->serial.rfind("KCA-", 0) == 0);
    CHECK(id->memory_bytes == (64ull << 30));
    CHECK((id->numa_node == 0 || id->numa_node == 1));
    serials.insert(id->serial);
    buses.insert(id->pci_bus_id);
  }
  CHECK(serials.size() == 8);
  CHECK(buses.size() == 8);
}

TEST_CASE("the sim's options choose revision and chip count") {
  TempDir dir;
  auto driver =
      Driver::load(testing::sim_library(), testing::fast_options(dir, "hardware_revision=b;chip_count=4"));
  REQUIRE(driver);
  CHECK((*driver)->chip_count().value() == 4);
  auto id = (*driver)->chip_identity(3);
  REQUIRE(id);
  CHECK(id->hardware_revision == "b");
  CHECK(id->serial.rfind("KCB-", 0) == 0);
}

TEST_CASE("a missing library is refused with a message naming the file") {
  auto driver = Driver::load("/nonexistent/libkiln_missing.so", "state_dir=/tmp/x");
  REQUIRE_FALSE(driver);
  CHECK(driver.error().code == Errc::not_found);
  CHECK(driver.error().message.find("/nonexistent/libkiln_missing.so") != std::string::npos);
  CHECK(driver.error().message.find("agent.toml") != std::string::npos);
}

TEST_CASE("a file that is not a shared library is refused") {
  TempDir dir;
  const auto file = dir.write("libnot_elf.so", "just text\n");
  auto driver = Driver::load(file, "");
  REQUIRE_FALSE(driver);
  CHECK(driver.error().code == Errc::io);
  CHECK(driver.error().message.find(file) != std::string::npos);
}

TEST_CASE("a library without the entry point is refused") {
  auto driver = Driver::load(testing::fake_library("no_entry"), "");
  REQUIRE_FALSE(driver);
  CHECK(driver.error().code == Errc::invalid_argument);
  CHECK(driver.error().message.find("kiln_driver_entry") != std::string::npos);
}

TEST_CASE("an ABI version mismatch is refused") {
  SUBCASE("the backend implements only another version") {
    auto driver = Driver::load(testing::fake_library("only_v2"), "");
    REQUIRE_FALSE(driver);
    CHECK(driver.error().code == Errc::unsupported_version);
    CHECK(driver.error().message.find("does not implement driver ABI version 1") !=
          std::string::npos);
  }
  SUBCASE("the backend answers with another version than asked") {
    auto driver = Driver::load(testing::fake_library("wrong_version"), "");
    REQUIRE_FALSE(driver);
    CHECK(driver.error().code == Errc::unsupported_version);
    CHECK(driver.error().message.find("answered with ABI version 2") != std::string::npos);
  }
  SUBCASE("the backend's table has no functions") {
    auto driver = Driver::load(testing::fake_library("incomplete"), "");
    REQUIRE_FALSE(driver);
    CHECK(driver.error().code == Errc::unsupported_version);
    CHECK(driver.error().message.find("incomplete") != std::string::npos);
  }
}

TEST_CASE("bad sim options are refused with the backend's own message") {
  TempDir dir;
  SUBCASE("out of range chip count") {
    auto driver = Driver::load(testing::sim_library(), testing::fast_options(dir, "chip_count=0"));
    REQUIRE_FALSE(driver);
    CHECK(driver.error().code == Errc::config);
    CHECK(driver.error().message.find("chip_count") != std::string::npos);
  }
  SUBCASE("unknown key") {
    auto driver = Driver::load(testing::sim_library(), testing::fast_options(dir, "colour=red"));
    REQUIRE_FALSE(driver);
    CHECK(driver.error().code == Errc::config);
    CHECK(driver.error().message.find("colour") != std::string::npos);
  }
  SUBCASE("no state directory") {
    auto driver = Driver::load(testing::sim_library(), "seed=3");
    REQUIRE_FALSE(driver);
    CHECK(driver.error().message.find("state_dir") != std::string::npos);
  }
}

TEST_CASE("a failing call carries a code and the backend's message") {
  TempDir dir;
  auto driver = Driver::load(testing::sim_library(), testing::fast_options(dir));
  REQUIRE(driver);
  auto id = (*driver)->chip_identity(99);
  REQUIRE_FALSE(id);
  CHECK(id.error().code == Errc::not_found);
  CHECK(id.error().message.find("chip 99") != std::string::npos);
  CHECK(id.error().message.find("8 chips") != std::string::npos);
  auto level = (*driver)->run_self_test(0, SelfTestKind::memory, 7);
  REQUIRE_FALSE(level);
  CHECK(level.error().code == Errc::invalid_argument);
  // The next successful call works as before.
  CHECK((*driver)->chip_telemetry(0));
}

}  // namespace
}  // namespace kiln::drivers
