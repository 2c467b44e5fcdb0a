#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/process/process_runner.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

using testing::read_file;
using testing::TempDir;

// The workloads in these tests are small shell scripts: the shell is the test's program here,
// never how the runner starts anything.
ProcessSpec shell(const TempDir& dir, const std::string& script, DurationMs timeout_ms = 10000) {
  ProcessSpec spec;
  spec.program = "/bin/sh";
  spec.args = {"-c", script};
  spec.work_dir = dir.path().string();
  spec.timeout_ms = timeout_ms;
  spec.kill_grace_ms = 300;
  return spec;
}

// Waits on wakeup_fd like the agent's loop does, until `count` processes have ended.
std::map<ProcessId, ProcessExit> wait_for(ProcessRunner& runner, std::size_t count,
                                          DurationMs limit_ms = 8000) {
  std::map<ProcessId, ProcessExit> exits;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  while (exits.size() < count && std::chrono::steady_clock::now() < give_up) {
    pollfd fd{runner.wakeup_fd(), POLLIN, 0};
    ::poll(&fd, 1, 100);
    for (ProcessExit& exit : runner.poll_finished()) exits.emplace(exit.id, std::move(exit));
  }
  REQUIRE_MESSAGE(exits.size() == count, "processes did not finish in time");
  return exits;
}

ProcessExit run_one(ProcessRunner& runner, const ProcessSpec& spec) {
  const Result<ProcessId> id = runner.start(spec);
  REQUIRE_MESSAGE(id.has_value(), id.error().describe());
  return wait_for(runner, 1).at(*id);
}

// True once the pid is gone or a zombie (this container's init may not reap orphans).
bool process_dead(const std::string& pid_text, DurationMs wait_ms = 2000) {
  const std::string stat_path = "/proc/" + std::to_string(std::stol(pid_text)) + "/stat";
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    const std::string stat = read_file(stat_path);
    const std::size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z")) {
      return true;
    }
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Writes its pid to leader.pid by rename, so a reader never sees a half-written file.
constexpr const char* kPublishPidThenSleep = "echo $$ > leader.tmp; mv leader.tmp leader.pid; sleep 30";

void wait_for_file(const std::string& path) {
  for (int i = 0; i < 400 && !std::filesystem::exists(path); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_MESSAGE(std::filesystem::exists(path), path << " never appeared");
}

}  // namespace

TEST_CASE("exit codes are reported") {
  TempDir dir;
  ProcessRunner runner;
  const ProcessExit ok = run_one(runner, shell(dir, "exit 0"));
  CHECK(ok.outcome == ProcessOutcome::exited);
  CHECK(ok.exit_code == 0);
  CHECK(ok.succeeded());

  const ProcessExit three = run_one(runner, shell(dir, "exit 3"));
  CHECK(three.outcome == ProcessOutcome::exited);
  CHECK(three.exit_code == 3);
  CHECK(three.term_signal == 0);
  CHECK(!three.succeeded());
  CHECK(three.detail == "/bin/sh exited with code 3");

  const ProcessExit crashed = run_one(runner, shell(dir, "kill -SEGV $$"));
  CHECK(crashed.outcome == ProcessOutcome::exited);
  CHECK(crashed.term_signal == SIGSEGV);
  CHECK(crashed.exit_code == -1);
  CHECK(!crashed.succeeded());
  CHECK(runner.running() == 0);
}

TEST_CASE("stdout and stderr are captured, with the environment and work dir asked for") {
  TempDir dir;
  ProcessRunner runner;
  ProcessSpec spec = shell(dir, "echo out; echo err >&2; echo \"$KILN_TEST_VALUE\"; pwd");
  spec.work_dir = dir.file("job-1");
  spec.env_extra["KILN_TEST_VALUE"] = "forty two";
  const ProcessExit exit = run_one(runner, spec);
  CHECK(exit.succeeded());
  const std::string expected = "out\nerr\nforty two\n" + dir.file("job-1") + "\n";
  CHECK(exit.output_tail == expected);
  CHECK(!exit.output_truncated);
  CHECK(exit.output_path.rfind(dir.file("job-1") + "/", 0) == 0);
  CHECK(read_file(exit.output_path) == expected);
}

TEST_CASE("only the last output_limit_bytes are returned; the file keeps everything") {
  TempDir dir;
  ProcessRunner runner;
  ProcessSpec spec = shell(dir, "i=0; while [ $i -lt 500 ]; do echo line-$i; i=$((i+1)); done");
  spec.output_limit_bytes = 100;
  spec.output_file = "job.log";
  const ProcessExit exit = run_one(runner, spec);
  CHECK(exit.succeeded());
  CHECK(exit.output_truncated);
  REQUIRE(exit.output_tail.size() == 100);
  CHECK(exit.output_tail.substr(exit.output_tail.size() - 9) == "line-499\n");
  CHECK(exit.output_path == dir.file("job.log"));
  const std::string full = read_file(exit.output_path);
  CHECK(full.substr(0, 7) == "line-0\n");
  CHECK(full.substr(full.size() - 100) == exit.output_tail);
}

TEST_CASE("a process that overruns its deadline is stopped and reported timed_out") {
  TempDir dir;
  ProcessRunner runner;
  const ProcessExit exit = run_one(runner, shell(dir, "sleep 30", 300));
  CHECK(exit.outcome == ProcessOutcome::timed_out);
  CHECK(exit.term_signal == SIGTERM);
  CHECK(exit.duration_ms >= 300);
  CHECK(exit.duration_ms < 2000);
  CHECK(exit.detail.find("overran its deadline of 300 ms and was stopped with SIGTERM") !=
        std::string::npos);
}

TEST_CASE("a process that ignores SIGTERM is killed with SIGKILL after the grace") {
  TempDir dir;
  ProcessRunner runner;
  ProcessSpec spec = shell(dir, "trap '' TERM; echo armed > armed; sleep 30; sleep 30", 300);
  spec.kill_grace_ms = 400;
  const ProcessExit exit = run_one(runner, spec);
  REQUIRE(std::filesystem::exists(dir.file("armed")));
  CHECK(exit.outcome == ProcessOutcome::timed_out);
  CHECK(exit.term_signal == SIGKILL);
  CHECK(exit.duration_ms >= 700);
  CHECK(exit.duration_ms < 3000);
  CHECK(exit.detail.find("SIGKILL after ignoring SIGTERM for 400 ms") != std::string::npos);
}

TEST_CASE("what a process started dies with it") {
  TempDir dir;
  ProcessRunner runner;
  SUBCASE("at its deadline") {
    // Long enough for a shell on a loaded machine to start its child before the deadline.
    const ProcessExit exit =
        run_one(runner, shell(dir, "sleep 30 & echo $! > child.tmp; mv child.tmp child.pid; sleep 30", 2000));
    CHECK(exit.outcome == ProcessOutcome::timed_out);
  }
  SUBCASE("when it exits on its own") {
    const ProcessExit exit = run_one(runner, shell(dir, "sleep 30 & echo $! > child.tmp; mv child.tmp child.pid"));
    CHECK(exit.succeeded());
  }
  SUBCASE("when it is cancelled") {
    // child.pid appears whole (by rename), so the pid is there once the file is.
    const Result<ProcessId> id =
        runner.start(shell(dir, "sleep 30 & echo $! > child.tmp; mv child.tmp child.pid; sleep 30", 30000));
    REQUIRE(id.has_value());
    wait_for_file(dir.file("child.pid"));
    REQUIRE(runner.cancel(*id).has_value());
    CHECK(wait_for(runner, 1).at(*id).outcome == ProcessOutcome::cancelled);
  }
  const std::string grandchild = read_file(dir.file("child.pid"));
  REQUIRE(!grandchild.empty());
  CHECK(process_dead(grandchild));
}

TEST_CASE("a child does not inherit the agent's blocked signals") {
  TempDir dir;
  ProcessRunner runner;
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigset_t before;
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &term, &before) == 0);
  // sleep itself, not through sh: a shell resets its signal mask when it starts.
  ProcessSpec spec = shell(dir, "", 300);
  spec.program = "/bin/sleep";
  spec.args = {"30"};
  const Result<ProcessId> id = runner.start(spec);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  REQUIRE(id.has_value());
  const ProcessExit exit = wait_for(runner, 1).at(*id);
  CHECK(exit.outcome == ProcessOutcome::timed_out);
  CHECK(exit.term_signal == SIGTERM);  // not SIGKILL after the grace
}

TEST_CASE("a child dies when the thread that started it exits") {
  TempDir dir;
  ProcessRunner runner;
  Result<ProcessId> id = fail(Errc::internal, "not started");
  std::thread([&] { id = runner.start(shell(dir, "sleep 30", 30000)); }).join();
  REQUIRE(id.has_value());
  const ProcessExit exit = wait_for(runner, 1, 3000).at(*id);
  CHECK(exit.outcome == ProcessOutcome::exited);
  CHECK(exit.term_signal == SIGKILL);
}

TEST_CASE("cancel stops a process and reports it cancelled") {
  TempDir dir;
  ProcessRunner runner;
  // The program ignores SIGTERM, so it is still stopping (for its kill grace) when the second
  // cancel arrives, whatever the scheduler does.
  const Result<ProcessId> id =
      runner.start(shell(dir, "trap '' TERM; echo ready > ready; sleep 30", 30000));
  REQUIRE(id.has_value());
  wait_for_file(dir.file("ready"));
  CHECK(runner.running() == 1);
  REQUIRE(runner.cancel(*id).has_value());
  CHECK(runner.cancel(*id).has_value());  // a second cancel while stopping is harmless
  const ProcessExit exit = wait_for(runner, 1, 3000).at(*id);
  CHECK(exit.outcome == ProcessOutcome::cancelled);
  CHECK(exit.duration_ms < 2000);
  CHECK(runner.running() == 0);

  const Status again = runner.cancel(*id);
  REQUIRE(!again.has_value());
  CHECK(again.error().code == Errc::conflict);
  const Status unknown = runner.cancel(*id + 100);
  REQUIRE(!unknown.has_value());
  CHECK(unknown.error().code == Errc::not_found);
}

TEST_CASE("a signal is forwarded to the program, which can act on it") {
  TempDir dir;
  ProcessRunner runner;
  const Result<ProcessId> id = runner.start(shell(
      dir, "trap 'echo checkpoint > usr1.txt; exit 0' USR1; echo ready > ready;"
           " while :; do sleep 0.05; done"));
  REQUIRE(id.has_value());
  wait_for_file(dir.file("ready"));
  REQUIRE(runner.signal(*id, SIGUSR1).has_value());
  const ProcessExit exit = wait_for(runner, 1).at(*id);
  CHECK(exit.succeeded());
  CHECK(read_file(dir.file("usr1.txt")) == "checkpoint\n");

  CHECK(runner.signal(*id, SIGUSR1).error().code == Errc::conflict);
  CHECK(runner.signal(*id, 0).error().code == Errc::invalid_argument);
}

TEST_CASE("a program that cannot run is reported failed_to_start, not thrown") {
  TempDir dir;
  ProcessRunner runner;
  SUBCASE("missing") {
    ProcessSpec spec = shell(dir, "");
    spec.program = "/nonexistent/kiln/workload";
    const ProcessExit exit = run_one(runner, spec);
    CHECK(exit.outcome == ProcessOutcome::failed_to_start);
    CHECK(exit.detail.find("/nonexistent/kiln/workload") != std::string::npos);
    CHECK(exit.detail.find("No such file or directory") != std::string::npos);
  }
  SUBCASE("executable but not a program the kernel can load") {
    const std::string fake = dir.write("not-a-binary", "plain text, no interpreter line\n");
    REQUIRE(::chmod(fake.c_str(), 0755) == 0);
    ProcessSpec spec = shell(dir, "");
    spec.program = fake;
    const ProcessExit exit = run_one(runner, spec);
    CHECK(exit.outcome == ProcessOutcome::failed_to_start);
    CHECK(exit.detail.find(fake) != std::string::npos);
  }
  CHECK(runner.running() == 0);
}

TEST_CASE("a spec that cannot be run at all is refused") {
  TempDir dir;
  ProcessRunner runner;
  ProcessSpec relative = shell(dir, "exit 0");
  relative.program = "sh";
  CHECK(runner.start(relative).error().code == Errc::invalid_argument);
  ProcessSpec no_deadline = shell(dir, "exit 0");
  no_deadline.timeout_ms = 0;
  CHECK(runner.start(no_deadline).error().code == Errc::invalid_argument);
  ProcessSpec bad_dir = shell(dir, "exit 0");
  bad_dir.work_dir = dir.write("a-file", "") + "/sub";
  CHECK(runner.start(bad_dir).error().code == Errc::io);
  CHECK(runner.running() == 0);
}

TEST_CASE("many children run at once and each is reported with its own status") {
  TempDir dir;
  ProcessRunner runner;
  constexpr int kChildren = 40;
  std::map<ProcessId, int> expected_code;
  for (int i = 0; i < kChildren; ++i) {
    ProcessSpec spec = shell(dir, "sleep 0.2; echo child-$1; exit $1");
    spec.args.push_back("sh");
    spec.args.push_back(std::to_string(i));
    const Result<ProcessId> id = runner.start(spec);
    REQUIRE(id.has_value());
    expected_code[*id] = i;
  }
  CHECK(runner.running() == kChildren);
  const std::map<ProcessId, ProcessExit> exits = wait_for(runner, kChildren);
  for (const auto& [id, code] : expected_code) {
    CAPTURE(code);
    const ProcessExit& exit = exits.at(id);
    CHECK(exit.outcome == ProcessOutcome::exited);
    CHECK(exit.exit_code == code);
    CHECK(exit.output_tail == "child-" + std::to_string(code) + "\n");
  }
  CHECK(runner.running() == 0);
}

TEST_CASE("destroying the runner kills what still runs") {
  TempDir dir;
  {
    ProcessRunner runner;
    REQUIRE(runner.start(shell(dir, "echo $$ > leader.pid; sleep 30", 30000)).has_value());
    wait_for_file(dir.file("leader.pid"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(process_dead(read_file(dir.file("leader.pid"))));
}

TEST_CASE("the group record lists each live child and is removed with the runner") {
  TempDir dir;
  const std::string record = dir.file("groups");
  {
    ProcessRunner runner(record);
    const Result<ProcessId> id = runner.start(shell(dir, kPublishPidThenSleep, 30000));
    REQUIRE(id.has_value());
    // Written before start() returned, so nothing the caller does next races it.
    const std::string listed = read_file(record);
    wait_for_file(dir.file("leader.pid"));
    const std::string leader = read_file(dir.file("leader.pid"));
    CHECK(listed.rfind(leader.substr(0, leader.size() - 1) + " ", 0) == 0);
    CHECK(listed.find(" /bin/sh\n") != std::string::npos);
    REQUIRE(runner.cancel(*id).has_value());
    wait_for(runner, 1);
    CHECK(read_file(record).empty());
    REQUIRE(runner.start(shell(dir, "sleep 30", 30000)).has_value());
    CHECK(!read_file(record).empty());
  }
  CHECK(!std::filesystem::exists(record));
}

TEST_CASE("kill_recorded_groups kills what a crashed runner left, grandchildren included") {
  TempDir dir;
  const std::string record = dir.file("groups");
  // A runner in a process that dies without cleaning up, as an agent does on SIGKILL: the
  // parent-death signal kills the shell, not the sleep it started.
  const pid_t owner = ::fork();
  REQUIRE(owner >= 0);
  if (owner == 0) {
    ProcessRunner runner(record);
    const std::string script = "sleep 60 & echo $! > grandchild.tmp; mv grandchild.tmp grandchild.pid; wait";
    if (!runner.start(shell(dir, script, 60000))) ::_exit(1);
    for (int i = 0; i < 400 && !std::filesystem::exists(dir.file("grandchild.pid")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(owner, &status, 0) == owner);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const std::string grandchild = read_file(dir.file("grandchild.pid"));
  REQUIRE(!grandchild.empty());
  REQUIRE(!process_dead(grandchild, 200));  // the leftover this is about

  const auto killed = kill_recorded_groups(record, 2000);
  REQUIRE_MESSAGE(killed.has_value(), killed.error().describe());
  REQUIRE(killed->size() == 1);
  CHECK(killed->front().program == "/bin/sh");
  CHECK(killed->front().processes_killed >= 1);
  CHECK(process_dead(grandchild, 0));  // gone when the call returns
  CHECK(!std::filesystem::exists(record));

  const auto again = kill_recorded_groups(record, 2000);
  REQUIRE(again.has_value());
  CHECK(again->empty());
}

TEST_CASE("a recorded group whose pid now belongs to another process is left alone") {
  TempDir dir;
  ProcessRunner runner;
  REQUIRE(runner.start(shell(dir, kPublishPidThenSleep, 30000)).has_value());
  wait_for_file(dir.file("leader.pid"));
  const std::string leader = read_file(dir.file("leader.pid"));
  // Same group id, another start time: the recorded group ended and its pid was reused.
  std::ofstream(dir.file("groups")) << std::stol(leader) << " 1 /bin/sh\n";
  const auto killed = kill_recorded_groups(dir.file("groups"), 2000);
  REQUIRE(killed.has_value());
  CHECK(killed->at(0).processes_killed == 0);
  CHECK(!process_dead(leader, 200));
  CHECK(!std::filesystem::exists(dir.file("groups")));
}

TEST_CASE("run_to_completion waits for one process") {
  TempDir dir;
  const Result<ProcessExit> exit = run_to_completion(shell(dir, "echo done; exit 5"));
  REQUIRE(exit.has_value());
  CHECK(exit->exit_code == 5);
  CHECK(exit->output_tail == "done\n");

  const Result<ProcessExit> late = run_to_completion(shell(dir, "sleep 30", 200));
  REQUIRE(late.has_value());
  CHECK(late->outcome == ProcessOutcome::timed_out);
}

}  // namespace kiln
