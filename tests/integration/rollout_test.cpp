// Nodes converge on their environment's bundle with the real binaries: the coordinator watches a
// real git repository, installs the bundle's driver and firmware (uploaded by digest) through
// kiln.install, one canary first, then the rest; a bundle whose firmware fails its check on the
// canary quarantines that node and goes no further. `kiln envs` shows desired against actual.
#include <csignal>
#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "common/sha256.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/git_repo.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

std::string digest_of(const fs::path& file) {
  auto digest = sha256_of_file(file.string(), 1 << 20);
  REQUIRE(digest.has_value());
  return *digest;
}

// The canary is listed; the rest of staging is whatever declares the pool's label.
const std::string kStagingNodes = "nodes = [\"n01\"]\nnode_labels = [\"pool=staging\"]\n";

struct Pin {
  std::string version;
  std::string sha256;
};

// A bundle file pinning the driver and the firmware with their packages.
std::string bundle_file(const std::string& id, const Pin& driver, const Pin& firmware) {
  std::string text = "id = \"" + id + "\"\nhardware_revisions = [\"a\"]\nmodel_configs_version = \"r1\"\n";
  for (const char* layer : {"framework", "compiler", "kernels", "runtime"}) {
    text += std::string("[layers.") + layer + "]\nversion = \"r1\"\ndigest = \"sha256:" + std::string(64, 'e') + "\"\n";
  }
  for (const auto& [layer, pin] : {std::pair{"driver", driver}, std::pair{"firmware", firmware}}) {
    text += std::string("[layers.") + layer + "]\nversion = \"" + pin.version + "\"\ndigest = \"sha256:" + pin.sha256 +
            "\"\n";
  }
  return text;
}

void promote(const fs::path& repo, const std::string& id, const Pin& driver, const Pin& firmware) {
  write(repo / "bundles" / (id + ".toml"), bundle_file(id, driver, firmware));
  write(repo / "environments" / "staging.toml", "bundle = \"" + id + "\"\n" + kStagingNodes);
  git_out(repo, {"add", "-A"});
  git_out(repo, {"commit", "-q", "-m", "staging runs " + id.substr(0, 12)});
}

json envs(Fleet& fleet) {
  std::string out, err;
  fleet.kiln_split("ops", {"--json", "envs"}, &out, &err);
  auto doc = json::parse(out, nullptr, false);
  REQUIRE_MESSAGE(doc.is_object(), out << err);
  REQUIRE(doc["environments"].size() == 1);
  return doc["environments"][0];
}

std::string node_state(const json& env, const std::string& node) {
  for (const auto& n : env["nodes"]) {
    if (n["node_id"] == node) return n["state"];
  }
  return "absent";
}

std::string firmware_of(cli::Client& client, const std::string& node_id) {
  auto n = node(client, node_id);
  return n && !n->chips.empty() ? n->chips[0].firmware_version : "";
}

// The driver version `kiln nodes --json` shows for the node.
std::string driver_of(Fleet& fleet, const std::string& node_id) {
  std::string out, err;
  fleet.kiln_split("ops", {"--json", "nodes"}, &out, &err);
  const auto nodes = json::parse(out, nullptr, false);
  REQUIRE_MESSAGE(nodes.is_array(), out << err);
  for (const auto& n : nodes) {
    if (n.value("node_id", "") == node_id) return n.value("driver_version", "");
  }
  return "";
}

// The staging repository with nothing promoted, watched by the coordinator, and four sim nodes:
// n01 is staging's canary, n02 and n03 are in its pool, n04 is another pool's.
fs::path staging_fleet(Fleet& fleet) {
  fleet.add_key("ops", "ops");
  const fs::path repo = fleet.dir() / "environments";
  fs::create_directories(repo);
  git_out(repo, {"init", "-q", "-b", "main"});
  write(repo / "compatibility.toml", "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"*\"]\ndriver = [\"*\"]\n"
                                     "runtime = [\"*\"]\n");
  write(repo / "environments" / "staging.toml", "bundle = \"\"\n" + kStagingNodes);
  git_out(repo, {"add", "-A"});
  git_out(repo, {"commit", "-q", "-m", "environments"});
  fleet.add_coordinator_tables("[environments]\nrepo = \"environments\"\npoll_interval_ms = 200\nwave_size = 2\n");
  fleet.add_agent({"n01", "a", {}}, "self_test_time_scale=0.05");
  for (const char* id : {"n02", "n03"}) fleet.add_agent({id, "a", {"pool=staging", "rack=r1"}}, "self_test_time_scale=0.05");
  fleet.add_agent({"n04", "a", {"pool=dev"}}, "self_test_time_scale=0.05");
  fleet.start_coordinator();
  for (const char* id : {"n01", "n02", "n03", "n04"}) fleet.start_agent(id);
  auto ops = fleet.client("ops");
  REQUIRE(Fleet::eventually([&] {
    for (const char* id : {"n01", "n02", "n03", "n04"}) {
      if (!node_state_is(*ops, id, protocol::NodeState::up)) return false;
    }
    return true;
  }, 20s));
  REQUIRE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "idle"; }, 10s));
  return repo;
}

// What the sim nodes run before any install.
const std::string kSimDriver = "kiln-sim 0.1.0";

}  // namespace

TEST_CASE("nodes converge on their environment's firmware: canary, then waves; a bad image stops at the canary") {
  Fleet fleet("rollout");
  const fs::path repo = staging_fleet(fleet);
  auto ops = fleet.client("ops");
  // The bundles pin the driver the nodes run: only the firmware differs.
  const fs::path driver = fleet.dir() / "driver-kiln-sim.run";
  write(driver, "#!/bin/sh\nexit 0\n");
  const Pin sim_driver{kSimDriver, digest_of(driver)};

  // A bundle whose packages the coordinator does not hold yet: nothing can be installed.
  const fs::path good = fleet.dir() / "firmware-2.0.0.bin";
  write(good, "firmware image 2.0.0");
  const std::string bundle_a(64, 'a');
  promote(repo, bundle_a, sim_driver, {"2.0.0", digest_of(good)});
  REQUIRE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "blocked"; }, 10s));
  CHECK(envs(fleet)["detail"].get<std::string>().find("kiln artifact upload") != std::string::npos);
  std::string out;
  CHECK(fleet.kiln("ops", {"envs"}, &out) == 1);
  CHECK(out.find("n01          drifted") != std::string::npos);

  REQUIRE(fleet.kiln("ops", {"artifact", "upload", driver.string()}, &out) == 0);
  REQUIRE(Fleet::eventually([&] { return envs(fleet)["detail"].get<std::string>().find("firmware 2.0.0") != std::string::npos; }, 10s));
  CHECK(envs(fleet)["rollout"] == "blocked");
  REQUIRE(fleet.kiln("ops", {"artifact", "upload", good.string()}, &out) == 0);
  CHECK(out.find("sha256:" + digest_of(good)) != std::string::npos);
  REQUIRE_MESSAGE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "converged"; }, 90s), envs(fleet).dump(2));
  CHECK(fleet.kiln("ops", {"envs"}, &out) == 0);
  for (const char* id : {"n01", "n02", "n03"}) CHECK(firmware_of(*ops, id) == "2.0.0");
  CHECK(firmware_of(*ops, "n04") != "2.0.0");  // another pool's node is not staging's
  CHECK(envs(fleet)["nodes"].size() == 3);
  // The agent adds what its driver declares (docs/driver-abi.md) to the labels of its config.
  CHECK(node(*ops, "n02")->labels == std::vector<std::string>{"pool=staging", "rack=r1", "backend=sim"});
  // The canary converged before anything else was installed.
  const std::string log = fleet.log_of("coordinator");
  const auto canary_done = log.find("job 1 succeeded");
  REQUIRE(canary_done != std::string::npos);
  CHECK(log.find("installs firmware 2.0.0 of bundle aaaaaaaaaaaa on node n01") < canary_done);
  CHECK(log.find("installs firmware 2.0.0 of bundle aaaaaaaaaaaa on node n02") > canary_done);
  CHECK(log.find("installs firmware 2.0.0 of bundle aaaaaaaaaaaa on node n03") > canary_done);

  // A firmware that fails its check on the canary: it rolls back there, the node is quarantined
  // with the reason, and no other node is touched.
  for (int chip = 0; chip < 8; ++chip) {
    REQUIRE(fleet.sim_chip("n01", {"inject", "--chip", std::to_string(chip), "--fault", "flash_fail", "--mode",
                                   "activate"}) == 0);
  }
  const fs::path bad = fleet.dir() / "firmware-3.0.0.bin";
  write(bad, "firmware image 3.0.0");
  REQUIRE(fleet.kiln("ops", {"artifact", "upload", bad.string()}, &out) == 0);
  const std::string bundle_b(64, 'b');
  promote(repo, bundle_b, sim_driver, {"3.0.0", digest_of(bad)});
  REQUIRE_MESSAGE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "halted"; }, 90s), envs(fleet).dump(2));
  const json env = envs(fleet);
  CHECK(env["bundle_id"] == bundle_b);
  CHECK(node_state(env, "n01") == "failed");
  CHECK(node_state(env, "n02") == "drifted");
  CHECK(node_state(env, "n03") == "drifted");
  auto n01 = node(*ops, "n01");
  REQUIRE(n01.has_value());
  CHECK(n01->state == protocol::NodeState::quarantined);
  CHECK_MESSAGE(n01->quarantine_reason.find("did not converge on bundle bbbbbbbbbbbb") != std::string::npos,
                n01->quarantine_reason);
  CHECK(firmware_of(*ops, "n01") == "2.0.0");  // rolled back
  CHECK(firmware_of(*ops, "n02") == "2.0.0");
  CHECK(fleet.log_of("coordinator").find("installs firmware 3.0.0 of bundle bbbbbbbbbbbb on node n02") ==
        std::string::npos);

  // Rolling the environment back by revert: n02 and n03 run it already, n01 converges once released.
  git_out(repo, {"revert", "--no-edit", "HEAD"});
  REQUIRE(Fleet::eventually([&] { return envs(fleet)["bundle_id"] == bundle_a; }, 10s));
  const json back = envs(fleet);
  CHECK(node_state(back, "n02") == "in_sync");
  CHECK(node_state(back, "n01") == "in_sync");  // it runs 2.0.0 again after its rollback
}

TEST_CASE("nodes converge on their environment's driver: an installer package runs on the canary, then the rest") {
  Fleet fleet("rollout-driver");
  const fs::path repo = staging_fleet(fleet);
  auto ops = fleet.client("ops");
  for (const char* id : {"n01", "n02", "n03"}) CHECK(driver_of(fleet, id) == kSimDriver);
  // A driver installer for the sim (docs/releases.md): it records the version in the node's state.
  const fs::path installer = fleet.dir() / "driver-2.0.0.run";
  write(installer, "#!/bin/sh\nexec '" + std::string(KILN_BIN_DIR) +
                       "/kiln-sim-chip' set-driver-version --driver-options \"$KILN_DRIVER_OPTIONS\" "
                       "\"$KILN_PACKAGE_VERSION\"\n");
  const fs::path firmware = fleet.dir() / "firmware-1.0.0.bin";
  write(firmware, "firmware image 1.0.0");
  std::string out;
  REQUIRE(fleet.kiln("ops", {"artifact", "upload", firmware.string()}, &out) == 0);
  const std::string bundle(64, 'c');
  promote(repo, bundle, {"2.0.0", digest_of(installer)}, {"1.0.0", digest_of(firmware)});  // the firmware they run
  REQUIRE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "blocked"; }, 10s));
  CHECK(envs(fleet)["detail"].get<std::string>().find("driver 2.0.0") != std::string::npos);
  CHECK(envs(fleet)["nodes"][0]["detail"] == "driver kiln-sim 0.1.0, desired 2.0.0");

  REQUIRE(fleet.kiln("ops", {"artifact", "upload", installer.string()}, &out) == 0);
  REQUIRE_MESSAGE(Fleet::eventually([&] { return envs(fleet)["rollout"] == "converged"; }, 90s), envs(fleet).dump(2));
  for (const char* id : {"n01", "n02", "n03"}) CHECK(driver_of(fleet, id) == "2.0.0");
  CHECK(driver_of(fleet, "n04") == kSimDriver);
  const std::string log = fleet.log_of("coordinator");
  const auto canary_done = log.find("job 1 succeeded");
  REQUIRE(canary_done != std::string::npos);
  CHECK(log.find("installs driver 2.0.0 of bundle cccccccccccc on node n01") < canary_done);
  CHECK(log.find("installs driver 2.0.0 of bundle cccccccccccc on node n02") > canary_done);
  CHECK(log.find("installs firmware") == std::string::npos);

  // The driver stays installed: a restarted agent reads it from the driver again.
  fleet.stop_agent("n02", SIGTERM);
  REQUIRE(Fleet::eventually([&] { return !node_state_is(*ops, "n02", protocol::NodeState::up); }, 20s));
  fleet.start_agent("n02");
  REQUIRE(Fleet::eventually([&] { return node_state_is(*ops, "n02", protocol::NodeState::up); }, 20s));
  CHECK(driver_of(fleet, "n02") == "2.0.0");
  CHECK(fleet.log_of("n02").find("unhealthy, driver 2.0.0)") != std::string::npos);
  CHECK(envs(fleet)["rollout"] == "converged");
}

}  // namespace kiln::testing
