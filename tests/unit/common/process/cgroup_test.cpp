#include <doctest/doctest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/process/cgroup.h"
#include "common/process/process_runner.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using testing::read_file;
using testing::TempDir;

// A hybrid layout as on this project's CI hosts: v1 controllers plus cgroup2 at .../unified.
constexpr const char* kHybridMountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

constexpr const char* kHybridCgroup =
    "9:name=systemd:/\n"
    "4:memory:/process_api/20f8\n"
    "0::/\n";

// A modern systemd host: the unified hierarchy alone, with a shared-propagation tag.
constexpr const char* kUnifiedMountinfo =
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw\n"
    "26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";

constexpr const char* kServiceCgroup = "0::/system.slice/kiln-agent.service\n";

TEST_CASE("the cgroup2 mount and the process's own cgroup are found in a hybrid and a unified layout") {
  const auto hybrid = cgroup2_mount_from_mountinfo(kHybridMountinfo);
  REQUIRE(hybrid.has_value());
  CHECK(hybrid->mount_point == "/sys/fs/cgroup/unified");
  CHECK(hybrid->root == "/");
  const auto own = cgroup2_path_from_proc_cgroup(kHybridCgroup);
  REQUIRE(own.has_value());
  CHECK(*own == "/");
  CHECK(cgroup2_directory(*hybrid, *own) == "/sys/fs/cgroup/unified");

  const auto unified = cgroup2_mount_from_mountinfo(kUnifiedMountinfo);
  REQUIRE(unified.has_value());
  CHECK(unified->mount_point == "/sys/fs/cgroup");
  const auto service = cgroup2_path_from_proc_cgroup(kServiceCgroup);
  REQUIRE(service.has_value());
  CHECK(cgroup2_directory(*unified, *service) == "/sys/fs/cgroup/system.slice/kiln-agent.service");
}

TEST_CASE("a cgroup2 mount of a subtree, an escaped mount point, and hosts without cgroup v2") {
  // A container's view: the mount shows only /kubepods/pod1, and paths are relative to it.
  const Cgroup2Mount subtree{"/sys/fs/cgroup", "/kubepods/pod1"};
  CHECK(cgroup2_directory(subtree, "/kubepods/pod1/agent") == "/sys/fs/cgroup/agent");
  CHECK(cgroup2_directory(subtree, "/kubepods/pod1") == "/sys/fs/cgroup");
  CHECK_FALSE(cgroup2_directory(subtree, "/kubepods/pod10/agent").has_value());
  CHECK_FALSE(cgroup2_directory(subtree, "/other").has_value());

  const auto escaped = cgroup2_mount_from_mountinfo("50 1 0:40 / /mnt/my\\040cgroups rw - cgroup2 none rw\n");
  REQUIRE(escaped.has_value());
  CHECK(escaped->mount_point == "/mnt/my cgroups");

  CHECK_FALSE(cgroup2_mount_from_mountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"));
  CHECK_FALSE(cgroup2_path_from_proc_cgroup("4:memory:/a\n1:cpu:/\n"));
}

// True once the pid is gone or a zombie (this container's init may not reap orphans).
bool gone(const std::string& pid) {
  const std::string stat = read_file("/proc/" + pid + "/stat");
  const std::size_t paren = stat.rfind(')');
  return stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
}

TEST_CASE("with a cgroup root, a child's setsid() grandchild dies with it and its cgroup is removed") {
  auto own = own_cgroup2_directory();
  const std::string root =
      own ? (std::filesystem::path(*own) / "kiln-jobs" / ("process-test-" + std::to_string(::getpid()))).string()
          : std::string();
  if (!own || !prepare_cgroup_root(root)) {
    MESSAGE("skipped: cgroup v2 is not writable here: "
            << (own ? prepare_cgroup_root(root).error().message : own.error().message));
    return;
  }
  TempDir dir("cgroup-runner");
  {
    ProcessRunner runner({}, root);
    ProcessSpec spec;
    spec.program = "/bin/sh";
    spec.args = {"-c", "setsid sleep 30 & echo $! > escapee.tmp; mv escapee.tmp escapee.pid; exit 0"};
    spec.work_dir = dir.path().string();
    spec.timeout_ms = 10000;
    spec.cgroup_name = "escape-attempt";
    REQUIRE(runner.start(spec).has_value());
    for (int i = 0; i < 800 && runner.poll_finished().empty(); ++i) {
      pollfd fd{runner.wakeup_fd(), POLLIN, 0};
      ::poll(&fd, 1, 10);
    }
    const std::string escapee = read_file((dir.path() / "escapee.pid").string());
    REQUIRE(!escapee.empty());
    CHECK(gone(escapee.substr(0, escapee.find('\n'))));
    CHECK_FALSE(std::filesystem::exists(std::filesystem::path(root) / "escape-attempt"));
  }
  const auto leftovers = kill_leftover_cgroups(root, 2000);
  REQUIRE(leftovers.has_value());
  CHECK(leftovers->empty());
  std::filesystem::remove(root);
}

}  // namespace
}  // namespace kiln
