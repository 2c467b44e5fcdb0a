#include "common/process/cgroup.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr DurationMs kEmptyPollMs = 5;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// mountinfo writes space, tab, newline and backslash in paths as \ooo.
std::string unescape_octal(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    const bool escape = field[i] == '\\' && i + 3 < field.size() &&
                        field.substr(i + 1, 3).find_first_not_of("01234567") == std::string_view::npos;
    if (escape) {
      out += static_cast<char>(std::stoi(std::string(field.substr(i + 1, 3)), nullptr, 8));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

// The non-empty pieces of text between separators.
std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> pieces;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(separator, at), text.size());
    if (end > at) pieces.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return pieces;
}

bool populated(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.events");
  std::string key;
  int value = 0;
  while (in >> key >> value) {
    if (key == "populated") return value != 0;
  }
  // No events file: the directory is gone, or not a cgroup; nothing is in it either way.
  return false;
}

std::vector<pid_t> procs_of(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.procs");
  std::vector<pid_t> pids;
  pid_t pid = 0;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

Status write_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return fail(Errc::io, "cannot open " + path + ": " + std::strerror(errno));
  const ssize_t written = ::write(fd, text.data(), text.size());
  const int write_errno = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(text.size())) {
    return fail(Errc::io, "cannot write " + path + ": " + std::strerror(write_errno));
  }
  return {};
}

// Depth first: a workload allowed to make cgroups may have made some inside its own.
bool remove_tree(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) remove_tree(it->path());
  }
  return ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

}  // namespace

std::optional<Cgroup2Mount> cgroup2_mount_from_mountinfo(std::string_view mountinfo) {
  for (std::string_view line : split(mountinfo, '\n')) {
    // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS"
    const std::size_t separator = line.find(" - ");
    if (separator == std::string_view::npos) continue;
    const auto before = split(line.substr(0, separator), ' ');
    const auto after = split(line.substr(separator + 3), ' ');
    if (before.size() < 5 || after.empty() || after[0] != "cgroup2") continue;
    return Cgroup2Mount{unescape_octal(before[4]), unescape_octal(before[3])};
  }
  return std::nullopt;
}

std::optional<std::string> cgroup2_path_from_proc_cgroup(std::string_view proc_cgroup) {
  for (std::string_view line : split(proc_cgroup, '\n')) {
    if (line.substr(0, 3) == "0::") return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::optional<std::string> cgroup2_directory(const Cgroup2Mount& mount, const std::string& cgroup_path) {
  std::string root = mount.root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string relative;
  if (root == "/") {
    relative = cgroup_path;
  } else if (cgroup_path == root) {
    relative = "/";
  } else if (cgroup_path.compare(0, root.size() + 1, root + "/") == 0) {
    relative = cgroup_path.substr(root.size());
  } else {
    return std::nullopt;
  }
  std::string dir = (fs::path(mount.mount_point) / fs::path(relative).relative_path()).lexically_normal().string();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "/" / "" leaves one
  return dir;
}

Result<std::string> own_cgroup2_directory() {
  const auto mount = cgroup2_mount_from_mountinfo(read_text("/proc/self/mountinfo"));
  if (!mount) return fail(Errc::unavailable, "no cgroup2 file system is mounted (see /proc/self/mountinfo)");
  const auto path = cgroup2_path_from_proc_cgroup(read_text("/proc/self/cgroup"));
  if (!path) return fail(Errc::unavailable, "this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)");
  auto dir = cgroup2_directory(*mount, *path);
  if (!dir) {
    return fail(Errc::unavailable, "this process's cgroup " + *path + " is not visible under the cgroup2 mount at " +
                                       mount->mount_point + " (which shows " + mount->root + ")");
  }
  return *dir;
}

Status prepare_cgroup_root(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Errc::unavailable, "cannot create the cgroup directory " + dir + ": " + ec.message());
  if (::access((fs::path(dir) / "cgroup.procs").c_str(), F_OK) != 0) {
    return fail(Errc::unavailable, dir + " is not a cgroup v2 directory (it has no cgroup.procs)");
  }
  if (::access((fs::path(dir) / "cgroup.kill").c_str(), W_OK) != 0) {
    return fail(Errc::unavailable, dir + "/cgroup.kill is missing or not writable (it needs Linux 5.14 or later)");
  }
  // Moving a child from our cgroup into one below `dir` needs write access to the cgroup.procs
  // of their common ancestor, which is our own cgroup or above it.
  auto own = own_cgroup2_directory();
  if (!own) return tl::unexpected(own.error());
  if (::access((fs::path(*own) / "cgroup.procs").c_str(), W_OK) != 0) {
    return fail(Errc::unavailable, "this process may not move processes out of its own cgroup " + *own + " (" +
                                       std::strerror(errno) + "); under systemd give the unit Delegate=yes");
  }
  return {};
}

Status kill_cgroup(const std::string& dir) { return write_file(dir + "/cgroup.kill", "1"); }

void signal_cgroup(const std::string& dir, int signo) {
  for (pid_t pid : procs_of(dir)) ::kill(pid, signo);
}

Status remove_cgroup(const std::string& dir, DurationMs wait_ms) {
  const auto give_up = Clock::now() + std::chrono::milliseconds(wait_ms);
  while (populated(dir)) {
    if (Clock::now() >= give_up) {
      return fail(Errc::unavailable, "cgroup " + dir + " still holds processes " + std::to_string(wait_ms) +
                                         " ms after cgroup.kill (stuck in the kernel?); see its cgroup.procs, "
                                         "and reboot the host if they cannot be killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kEmptyPollMs));
  }
  if (!remove_tree(dir)) {
    return fail(Errc::io, "cannot remove the cgroup " + dir + ": " + std::strerror(errno));
  }
  return {};
}

Result<std::vector<LeftoverCgroup>> kill_leftover_cgroups(const std::string& root, DurationMs wait_ms) {
  std::vector<LeftoverCgroup> found;
  std::error_code ec;
  if (!fs::exists(root, ec)) return found;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string dir = it->path().string();
    LeftoverCgroup leftover{it->path().filename().string(), procs_of(dir).size()};
    if (populated(dir)) {
      if (auto killed = kill_cgroup(dir); !killed) return tl::unexpected(killed.error());
    }
    if (auto removed = remove_cgroup(dir, wait_ms); !removed) return tl::unexpected(removed.error());
    found.push_back(std::move(leftover));
  }
  if (ec) return fail(Errc::io, "cannot list the cgroups under " + root + ": " + ec.message());
  return found;
}

}  // namespace kiln
