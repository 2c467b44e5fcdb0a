#include "release/shell/git.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

extern char** environ;

namespace kiln::release {

Git::Git(std::string work_tree, std::string identity, DurationMs timeout_ms)
    : work_tree_(std::move(work_tree)), identity_(std::move(identity)), timeout_ms_(timeout_ms) {}

Result<GitOutput> Git::run(const std::vector<std::string>& args) const {
  // The identity and a fixed locale come in as -c and environment, so the user's git config
  // cannot change whom a commit names or the messages kiln reads.
  std::vector<std::string> argv = {"git", "-C", work_tree_, "-c", "user.name=" + identity_,
                                   "-c", "user.email=" + identity_ + "@kiln", "-c", "commit.gpgsign=false"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (auto& arg : argv) c_argv.push_back(arg.data());
  c_argv.push_back(nullptr);
  std::vector<std::string> env_strings = {"LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_EDITOR=true"};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (entry.starts_with("LC_ALL=") || entry.starts_with("GIT_TERMINAL_PROMPT=") || entry.starts_with("GIT_EDITOR=") ||
        entry.starts_with("GIT_DIR=") || entry.starts_with("GIT_WORK_TREE=")) {
      continue;
    }
    env_strings.emplace_back(entry);
  }
  std::vector<char*> c_env;
  for (auto& entry : env_strings) c_env.push_back(entry.data());
  c_env.push_back(nullptr);

  int out_pipe[2];
  int err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return fail(Errc::internal, fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return fail(Errc::internal, fmt::format("pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, "git", &actions, nullptr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (spawned != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return fail(Errc::internal, fmt::format("cannot run git: {}; install git (scripts/setup does)", std::strerror(spawned)));
  }

  GitOutput output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&output.out, &output.err};
  int open_pipes = 2;
  bool timed_out = false;
  while (open_pipes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[8192];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  for (auto& fd : fds) {
    if (fd.fd >= 0) ::close(fd.fd);
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return fail(Errc::internal, fmt::format("git {} did not finish within {} ms and was stopped", fmt::join(args, " "),
                                            timeout_ms_));
  }
  output.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return output;
}

Result<std::string> Git::check(const std::vector<std::string>& args) const {
  auto output = run(args);
  if (!output) return tl::unexpected(output.error());
  if (output->exit_code != 0) {
    std::string message = output->err.empty() ? output->out : output->err;
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
    return fail(Errc::internal, fmt::format("git {} failed in {}: {}", fmt::join(args, " "), work_tree_, message));
  }
  return std::move(output->out);
}

}  // namespace kiln::release
