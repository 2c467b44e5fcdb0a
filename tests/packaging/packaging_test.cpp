// The Debian packages as scripts/package builds them from this build (docs/operations.md,
// "Installing from packages"): what each one holds and depends on, lintian, systemd-analyze on
// every unit, and the packaged programs run from the unpacked packages with the packaged
// configs on loopback. As root, the packages are also installed with dpkg into an overlay of
// this host's root, which runs their maintainer scripts.
#include <doctest/doctest.h>

#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/run_command.h"
#include "common/http/client.h"
#include "common/transport/loopback_ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln::testing;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

const std::string kVersion = KILN_VERSION;
const std::string kPkgLibDir = KILN_PKGLIBDIR;
const std::string kUnitDir = KILN_SYSTEMD_UNIT_DIR;

// The tools these tests run, each with the Debian package scripts/setup installs it from.
const std::vector<std::pair<std::string, std::string>> kTools = {
    {"dpkg-deb", "dpkg"}, {"dpkg-shlibdeps", "dpkg-dev"}, {"lintian", "lintian"}, {"systemd-analyze", "systemd"}};

std::string missing_tools() {
  std::string missing;
  for (const auto& [tool, package] : kTools) {
    if (run("command -v " + tool).status != 0) missing += tool + " (package " + package + ") ";
  }
  return missing;
}

// True, with the reason in the output (ctest marks the test skipped), when a tool is missing.
bool skipped() {
  static const std::string missing = missing_tools();
  if (missing.empty()) return false;
  MESSAGE("kiln test skipped: " << missing << "not installed; scripts/setup installs it");
  return true;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The packages, built once for every test case: package name -> .deb.
struct Built {
  TempDir dir{"kiln-packages"};
  Ran made;
  std::map<std::string, std::string> debs;
};

const Built& packages() {
  static Built built;
  static const bool made = [] {
    built.made = run("KILN_PACKAGE_NO_BUILD=1 KILN_BUILD_DIR=" KILN_BIN_DIR "/.. " KILN_SOURCE_DIR "/scripts/package " +
                     built.dir.file("debs"));
    for (const std::string& line : lines(built.made.output)) {
      const std::string name = fs::path(line).filename().string();
      if (line.front() == '/' && name.size() > 4 && name.substr(name.size() - 4) == ".deb") {
        built.debs[name.substr(0, name.find('_'))] = line;
      }
    }
    return true;
  }();
  (void)made;
  INFO(built.made.output);
  REQUIRE(built.made.status == 0);
  REQUIRE(built.debs.size() == 4);
  return built;
}

// The four packages unpacked with dpkg-deb -x into one root, as they would lie on a host.
const fs::path& unpacked_root() {
  static const fs::path root = packages().dir / "root";
  static const bool unpacked = [] {
    for (const auto& [name, deb] : packages().debs) {
      const Ran x = run("dpkg-deb -x " + deb + " " + root.string());
      INFO(x.output);
      REQUIRE(x.status == 0);
    }
    return true;
  }();
  (void)unpacked;
  return root;
}

std::string field(const std::string& deb, const std::string& name) {
  std::string value = run("dpkg-deb -f " + deb + " " + name).output;
  while (!value.empty() && value.back() == '\n') value.pop_back();
  return value;
}

// The regular files a package holds, as absolute paths.
std::set<std::string> files_of(const std::string& deb) {
  std::set<std::string> files;
  for (const std::string& line : lines(run("dpkg-deb -c " + deb).output)) {
    if (line.empty() || line.front() != '-') continue;  // directories and links
    files.insert(line.substr(line.find("./") + 1));
  }
  return files;
}

std::set<std::string> expected_files(const std::string& package) {
  std::set<std::string> files = {"/usr/share/doc/" + package + "/copyright", "/usr/share/doc/" + package + "/changelog.gz"};
  const auto man = [&](const std::string& page) {
    if (KILN_MAN_PAGES) files.insert("/usr/share/man/man" + page.substr(page.size() - 1) + "/" + page + ".gz");
  };
  if (package == "kiln") {
    files.insert({"/usr/bin/kiln", "/usr/share/doc/kiln/examples/client.toml"});
    man("kiln.1");
  } else if (package == "kiln-coordinator") {
    files.insert({"/usr/bin/kiln-coordinator", "/usr/bin/kiln-qualifier", "/etc/kiln/coordinator.toml",
                  "/etc/kiln/qualifier.toml", kUnitDir + "/kiln-coordinator.service", kUnitDir + "/kiln-qualifier.service",
                  "/usr/share/kiln/monitoring/kiln-alerts.yml", "/usr/share/kiln/monitoring/kiln-alerts.test.yml",
                  "/usr/share/kiln/monitoring/kiln-dashboard.json", "/usr/share/kiln/monitoring/prometheus.yml"});
    man("kiln-coordinator.8");
    man("kiln-qualifier.8");
  } else if (package == "kiln-agent") {
    files.insert({"/usr/bin/kiln-agent", "/usr/bin/kiln-agent-check", "/etc/kiln/agent.toml",
                  kUnitDir + "/kiln-agent.service"});
    man("kiln-agent.8");
    man("kiln-agent-check.8");
  } else {
    files.insert({"/usr/bin/kiln-sim-chip", kPkgLibDir + "/libkiln_sim_driver.so", kPkgLibDir + "/libkiln_cpu_driver.so",
                  kPkgLibDir + "/workloads/kiln-workload-smoke", kPkgLibDir + "/workloads/kiln-workload-model",
                  "/usr/share/kiln/sim/qualification-set.toml", "/usr/share/kiln/sim/risks.toml",
                  "/usr/share/kiln/sim/workloads.json"});
    man("kiln-sim-chip.1");
  }
  return files;
}

// A packaged config moved under the unpacked root: its installed paths point into `root`, its
// ports are free ones (7601 and 7602 may be taken on a shared host), and the agent's socket group
// is this user's (the kiln group is made by the postinst, which dpkg-deb -x does not run).
std::string adjusted(std::string text, const fs::path& root, int agent_port, int client_port,
                     const std::map<std::string, int>& http_ports = {}) {
  const auto replace_all = [&](const std::string& from, const std::string& to) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
    }
  };
  for (const std::string prefix : {"/etc/kiln", "/var/lib/kiln", "/usr/lib/", "/usr/share/kiln", "/run/kiln"}) {
    replace_all(prefix, root.string() + prefix);
  }
  replace_all("127.0.0.1:7601", "127.0.0.1:" + std::to_string(agent_port));
  replace_all("127.0.0.1:7602", "127.0.0.1:" + std::to_string(client_port));
  for (const auto& [address, port] : http_ports) replace_all(address, "127.0.0.1:" + std::to_string(port));
  replace_all("group = \"kiln\"", std::string("group = \"") + ::getgrgid(::getgid())->gr_name + "\"");
  return text;
}

// Writes (or with std::ios::app, appends) `text` to `path`; returns the path.
std::string write_text(const fs::path& path, const std::string& text, std::ios::openmode mode = std::ios::trunc) {
  std::ofstream(path, std::ios::binary | mode) << text;
  return path.string();
}

std::string key_entry(const std::string& name, const std::string& role, const fs::path& public_key) {
  return "\n[[keys]]\nname = \"" + name + "\"\nrole = \"" + role + "\"\npublic_key_file = \"" + public_key.string() +
         "\"\n";
}

}  // namespace

TEST_CASE("scripts/package builds kiln, kiln-coordinator, kiln-agent and kiln-sim from the install tree") {
  if (skipped()) return;
  const Built& built = packages();
  for (const auto& [package, deb] : built.debs) {
    INFO(package);
    CHECK(fs::path(deb).filename() == package + "_" + kVersion + "_" + field(deb, "Architecture") + ".deb");
    CHECK(field(deb, "Version") == kVersion);
    CHECK(field(deb, "Source") == "kiln");
    CHECK(contains(field(deb, "Maintainer"), "@"));
    const std::string description = field(deb, "Description");
    CHECK(lines(description).size() >= 3);  // a synopsis and a paragraph
    // dpkg-shlibdeps found what the programs link.
    const std::string depends = field(deb, "Depends");
    for (const char* library : {"libc6", "libstdc++6", "libzmq5"}) CHECK_MESSAGE(contains(depends, library), depends);
    CHECK(files_of(deb) == expected_files(package));
  }
  const auto debs = built.debs;
  CHECK(contains(field(debs.at("kiln-coordinator"), "Depends"), "libsqlite3-0"));
  CHECK(contains(field(debs.at("kiln-agent"), "Depends"), "libhwloc15"));
  for (const char* daemon : {"kiln-coordinator", "kiln-agent"}) {
    INFO(daemon);
    const std::string deb = debs.at(daemon);
    // keygen is the kiln package's; the postinst makes the kiln user.
    CHECK(contains(field(deb, "Depends"), "kiln (= " + kVersion + "), adduser"));
    CHECK(contains(field(deb, "Recommends"), "kiln-sim (= " + kVersion + ")"));
    const std::string postinst = run("dpkg-deb -I " + deb + " postinst").output;
    CHECK(contains(postinst, "adduser --system"));
    CHECK(contains(postinst, "kiln keygen --out"));
    CHECK(run("dpkg-deb -I " + deb + " prerm").status == 0);
    CHECK(run("dpkg-deb -I " + deb + " postrm").status == 0);
  }
  CHECK(run("dpkg-deb -I " + debs.at("kiln-coordinator") + " conffiles").output ==
        "/etc/kiln/coordinator.toml\n/etc/kiln/qualifier.toml\n");
  CHECK(run("dpkg-deb -I " + debs.at("kiln-agent") + " conffiles").output == "/etc/kiln/agent.toml\n");
  for (const char* plain : {"kiln", "kiln-sim"}) {
    CHECK(run("dpkg-deb -I " + debs.at(plain) + " postinst").status != 0);  // no maintainer scripts
  }
  if (!KILN_MAN_PAGES) MESSAGE("manual pages not checked: help2man was not found when kiln was configured");
}

TEST_CASE("lintian finds no error in the packages") {
  if (skipped()) return;
  std::string debs;
  for (const auto& [package, deb] : packages().debs) debs += " " + deb;
  const Ran lintian = run("lintian --tag-display-limit 0 --fail-on error" + debs);
  INFO(lintian.output);
  CHECK(lintian.status == 0);
  std::string warnings;
  for (const std::string& line : lines(lintian.output)) {
    CHECK_MESSAGE(line.rfind("E: ", 0) != 0, line);
    if (line.rfind("W: ", 0) == 0) warnings += line + "\n";
  }
  // docs/operations.md lists the warnings it cannot fix; today there are none.
  CHECK_MESSAGE(warnings.empty(), warnings);
}

TEST_CASE("systemd-analyze verify accepts every unit as packaged") {
  if (skipped()) return;
  // Under --root, systemd-analyze looks for the units' programs and the targets they name in
  // the root: the unpacked packages, and beside their units this host's own (sysinit.target,
  // network-online.target, ...), in a copy of the root so the other cases see the packages alone.
  const fs::path root = packages().dir / "verify-root";
  fs::copy(unpacked_root(), root, fs::copy_options::recursive);
  for (const auto& unit : fs::directory_iterator(kUnitDir)) {
    const fs::path to = root / fs::path(kUnitDir).relative_path() / unit.path().filename();
    std::error_code ignored;
    if (!fs::exists(to)) fs::copy(unit.path(), to, fs::copy_options::copy_symlinks, ignored);
  }
  for (const char* unit : {"kiln-coordinator.service", "kiln-qualifier.service", "kiln-agent.service"}) {
    INFO(unit);
    // Its Documentation= pages are looked up with man(1), in the packages' pages.
    const Ran verify = run("MANPATH=" + (root / "usr/share/man").string() + " systemd-analyze verify --root=" +
                           root.string() + " " + unit);
    CHECK(verify.status == 0);
    // Unknown keys and values it cannot parse are only warnings to systemd-analyze.
    CHECK_MESSAGE(!contains(verify.output, "kiln"), verify.output);
  }
  // The check sees what it should: a unit whose program is missing is refused.
  fs::remove(root / "usr/bin/kiln-agent");
  CHECK(run("MANPATH=" + (root / "usr/share/man").string() + " systemd-analyze verify --root=" + root.string() +
            " kiln-agent.service")
            .status != 0);
}

TEST_CASE("every packaged program runs from the unpacked packages") {
  if (skipped()) return;
  const fs::path& root = unpacked_root();
  for (const std::string& program : std::vector<std::string>{"usr/bin/kiln", "usr/bin/kiln-coordinator", "usr/bin/kiln-qualifier", "usr/bin/kiln-agent", "usr/bin/kiln-agent-check",
        "usr/bin/kiln-sim-chip", kPkgLibDir.substr(1) + "/workloads/kiln-workload-smoke",
        kPkgLibDir.substr(1) + "/workloads/kiln-workload-model"}) {
    const Ran version = run((root / program).string() + " --version");
    INFO(program << ": " << version.output);
    CHECK(version.status == 0);
    CHECK(contains(version.output, fs::path(program).filename().string() + " " + kVersion));
  }
}

TEST_CASE("the packaged coordinator, agent and client work together with the packaged configs on loopback") {
  if (skipped()) return;
  const fs::path& root = unpacked_root();
  const fs::path etc = root / "etc/kiln";
  const fs::path state = root / "var/lib/kiln";
  const auto bin = [&](const std::string& program) { return (root / "usr/bin" / program).string(); };
  // The endpoints' ports and the three /metrics ports, all different.
  const std::vector<int> ports = kiln::transport::free_loopback_ports(5);
  const int agent_port = ports[0];
  const int client_port = ports[1];

  // What the postinsts do (dpkg-deb -x runs none): the key pairs, the state folders; and what
  // systemd does for kiln-agent.service: /run/kiln.
  for (const char* key : {"coordinator", "qualifier", "agent"}) {
    REQUIRE(run(bin("kiln") + " keygen --out " + (etc / key).string()).status == 0);
  }
  for (const char* dir : {"coordinator", "agent", "qualifier/bundles", "qualifier/golden", "qualifier/tickets"}) {
    fs::create_directories(state / dir);
  }
  fs::create_directories(root / "run/kiln");
  // The /metrics addresses of the packaged configs, moved to free ports too.
  std::map<std::string, int> http_ports;
  int next_port = 2;
  for (const char* packaged : {"127.0.0.1:9470", "127.0.0.1:9471", "127.0.0.1:9472"}) {
    http_ports[packaged] = ports[next_port++];
  }
  for (const char* config : {"coordinator.toml", "qualifier.toml", "agent.toml"}) {
    const std::string packaged = read_file(etc / config);
    CHECK(contains(packaged, "[http]"));
    write_text(etc / config, adjusted(packaged, root, agent_port, client_port, http_ports));
  }
  // The operator's step the coordinator's config asks for: list the agent's key and a person's.
  const fs::path client_dir = packages().dir / "home/.config/kiln";
  fs::create_directories(client_dir);
  REQUIRE(run(bin("kiln") + " keygen --out " + (client_dir / "me").string()).status == 0);
  write_text(etc / "coordinator.toml",
             key_entry("n01", "agent", etc / "agent.pub") + key_entry("me", "ops", client_dir / "me.pub"), std::ios::app);
  // The client's example, where it says to put it, with the coordinator's public key beside it.
  const std::string example = read_file(root / "usr/share/doc/kiln/examples/client.toml");
  write_text(client_dir / "client.toml", adjusted(example, root, agent_port, client_port));
  fs::copy_file(etc / "coordinator.pub", client_dir / "coordinator.pub");

  for (const std::string daemon : {"kiln-coordinator", "kiln-agent"}) {
    const std::string config = (etc / (daemon.substr(5) + ".toml")).string();
    const Ran check = run(bin(daemon) + " --config " + config + " check-config");
    INFO(check.output);
    CHECK(check.status == 0);
  }
  // The qualifier's config loads the sim's model set; it needs golden references to start.
  const std::string model = (root / kPkgLibDir.substr(1) / "workloads/kiln-workload-model").string();
  const std::string qualifier_config = (etc / "qualifier.toml").string();
  CHECK(run(bin("kiln-qualifier") + " --config " + qualifier_config + " check-config").status == 2);
  REQUIRE(run(model + " --model mlp-bf16 --data-seed 1 --write-golden " + (state / "qualifier/golden").string()).status ==
          0);
  const Ran qualifier = run(bin("kiln-qualifier") + " --config " + qualifier_config + " check-config");
  INFO(qualifier.output);
  CHECK(qualifier.status == 0);
  CHECK(contains(qualifier.output, "qualification-set.toml (60 models)"));

  const fs::path logs = packages().dir / "logs";
  fs::create_directories(logs);
  ChildProcess coordinator({bin("kiln-coordinator"), "--config", (etc / "coordinator.toml").string()},
                           logs / "coordinator.log");
  ChildProcess agent({bin("kiln-agent"), "--config", (etc / "agent.toml").string()}, logs / "agent.log");
  const std::string kiln = "timeout 120 " + bin("kiln") + " --config " + (client_dir / "client.toml").string();
  Ran nodes;
  CHECK(Fleet::eventually(
      [&] {
        nodes = run(kiln + " nodes");
        return nodes.status == 0 && contains(nodes.output, "n01          up");
      },
      30s));
  INFO("coordinator: " << read_file(logs / "coordinator.log") << "\nagent: " << read_file(logs / "agent.log"));
  INFO(nodes.output);
  // The smoke workload of the packaged agent.toml, through the packaged sim driver.
  const Ran smoke = run(kiln + " submit --workload smoke --chips 8 --wait");
  INFO(smoke.output);
  CHECK(smoke.status == 0);
  CHECK(contains(smoke.output, "succeeded"));
  // The packaged configs serve /metrics: the coordinator's pool and the agent's chips.
  const auto scrape = [&](const char* packaged) {
    return kiln::http::get("127.0.0.1:" + std::to_string(http_ports.at(packaged)), "/metrics");
  };
  const auto pool = scrape("127.0.0.1:9470");
  CHECK(pool.status == 200);
  CHECK(contains(pool.body, "kiln_jobs_finished_total{"));
  CHECK(Fleet::eventually([&] { return contains(scrape("127.0.0.1:9472").body, "kiln_chip_temperature_celsius{"); },
                          15s));
  // The agent's local socket in /run/kiln answers on the host.
  const Ran status = run("timeout 60 " + bin("kiln-agent") + " --config " + (etc / "agent.toml").string() + " status");
  INFO(status.output);
  CHECK(status.status == 0);
  CHECK(contains(status.output, "node n01"));
  // The unit tier finds both backends in the package's library folder (docs/qualification.md).
  REQUIRE(run(kiln + " change import " KILN_SOURCE_DIR "/qualification/data/demo-day-changes.toml").status ==
          0);
  const Ran bundle = run(kiln + " bundle build --bundle-dir " + (state / "qualifier/bundles").string());
  INFO(bundle.output);
  REQUIRE(bundle.status == 0);
  const std::string bundle_id = bundle.output.substr(7, bundle.output.find(' ', 7) - 7);  // "bundle ID at change ..."
  const Ran unit = run(kiln + " unit --bundle " + bundle_id + " --all");
  INFO(unit.output);
  CHECK(contains(unit.output, "test runs passed on sim, cpu"));

  agent.signal(SIGTERM);
  coordinator.signal(SIGTERM);
  CHECK(agent.wait(30s) == 0);
  CHECK(coordinator.wait(30s) == 0);
}

TEST_CASE("dpkg installs the packages, their maintainer scripts make the user, keys and state, and purge removes them") {
  if (skipped()) return;
  if (::geteuid() != 0 || run("command -v unshare && command -v chroot").status != 0) {
    MESSAGE("the install with dpkg was not run: it needs root (to mount an overlay of / in a namespace of its own), "
            "unshare and chroot");
    return;
  }
  std::string debs;
  for (const auto& [package, deb] : packages().debs) debs += " " + deb;
  const Ran installed = run("unshare --mount --propagation private sh " KILN_SOURCE_DIR "/tests/packaging/dpkg_install.sh " +
                            (packages().dir / "install").string() + debs);
  INFO(installed.output);
  REQUIRE(installed.status == 0);
  for (const char* line : {"user: kiln:/var/lib/kiln:/usr/sbin/nologin", "coordinator.key: kiln 600",
                           "qualifier.key: kiln 600", "agent.key: root 600", "coordinator.pub: root 644",
                           "coordinator: kiln 750", "qualifier: kiln 750", "qualifier/golden: kiln 750",
                           "agent: root 750",
                           // The coordinator serves with its packaged config; the agent and the
                           // qualifier wait for their site's.
                           "enabled: kiln-coordinator.service \n", "coordinator check-config as kiln: ok",
                           "agent check-config: ok", "key kept on reinstall", "# edited by the operator",
                           "purge removed /etc/kiln and /var/lib/kiln", "enabled after purge: \n",
                           // Debian keeps system users: files it owns elsewhere keep their owner.
                           "user after purge: kiln"}) {
    CHECK_MESSAGE(contains(installed.output, line), line);
  }
}
