#include "agent/host/containment.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include "common/process/cgroup.h"

namespace kiln::agent {
namespace {

namespace fs = std::filesystem;

// FNV-1a: stable on every platform, so a restarted agent finds its predecessor's directory.
std::string path_hash(const std::string& path) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char byte : path) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

Result<std::string> agent_cgroup_path(const AgentConfig& config) {
  std::string parent;
  if (config.cgroup_root) {
    parent = *config.cgroup_root;
  } else {
    auto own = own_cgroup2_directory();
    if (!own) return tl::unexpected(own.error());
    parent = *own;
  }
  return (fs::path(parent) / "kiln-jobs" / (config.node_id + "-" + path_hash(fs::absolute(config.work_dir).string())))
      .string();
}

Result<std::string> usable_cgroup_dir(const AgentConfig& config) {
  auto dir = agent_cgroup_path(config);
  if (!dir) return dir;
  if (Status ready = prepare_cgroup_root(*dir); !ready) return tl::unexpected(ready.error());
  return dir;
}

}  // namespace

Result<ContainmentChoice> choose_containment(const AgentConfig& config) {
  ContainmentChoice choice;
  if (config.job_containment == JobContainment::process_group) return choice;
  auto dir = usable_cgroup_dir(config);
  if (dir) {
    choice.cgroup = true;
    choice.cgroup_dir = *dir;
    return choice;
  }
  if (config.job_containment == JobContainment::cgroup) {
    return fail(Errc::config, config.config_path + ": job_containment = \"cgroup\" but cgroup v2 cannot be used: " +
                                  dir.error().message + "; fix that, or set job_containment = \"auto\" or "
                                  "\"process-group\"");
  }
  choice.why_not_cgroup = dir.error().message;
  return choice;
}

Result<ContainmentChoice> check_containment(const AgentConfig& config) {
  auto dir = agent_cgroup_path(config);
  std::error_code ec;
  const bool existed = dir && fs::exists(*dir, ec);
  auto choice = choose_containment(config);
  // An agent that is running keeps its directory; one made only to check is not left behind.
  if (choice && choice->cgroup && !existed) ::rmdir(choice->cgroup_dir.c_str());
  return choice;
}

std::string describe_containment(const ContainmentChoice& choice) {
  if (choice.cgroup) return "job containment: a cgroup v2 directory per child under " + choice.cgroup_dir;
  if (choice.why_not_cgroup.empty()) return "job containment: process groups (job_containment = \"process-group\")";
  return "job containment: process groups only, because cgroup v2 cannot be used: " + choice.why_not_cgroup +
         "; a workload that calls setsid() can then outlive the agent (see docs/operations.md)";
}

}  // namespace kiln::agent
