#include "tests/integration/headless_chromium.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <thread>

extern char** environ;

namespace kiln::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// A descriptor above the ones the child's 0 to 4 will be, so that dup2 onto 3 and 4 never maps
// a descriptor onto itself (which would keep its close-on-exec flag).
int above_four(int fd) {
  if (fd > 4) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
  ::close(fd);
  return moved;
}

std::string text_of_console_call(const json& params) {
  std::string text;
  for (const json& arg : params.value("args", json::array())) {
    if (!text.empty()) text += ' ';
    if (arg.contains("value") && arg.at("value").is_string()) text += arg.at("value").get<std::string>();
    else text += arg.value("description", arg.dump());
  }
  return "console." + params.value("type", std::string("?")) + ": " + text;
}

}  // namespace

std::optional<std::string> HeadlessChromium::find() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    for (const char* name : {"chromium", "chromium-browser"}) {
      const fs::path candidate = fs::path(dir) / name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  return std::nullopt;
}

HeadlessChromium::HeadlessChromium(const std::string& program, const fs::path& profile_dir) {
  int to[2];
  int from[2];
  if (::pipe2(to, O_CLOEXEC) != 0 || ::pipe2(from, O_CLOEXEC) != 0) {
    failed_ = "cannot make the DevTools pipes";
    return;
  }
  const int child_reads = above_four(to[0]);
  to_browser_ = above_four(to[1]);
  from_browser_ = above_four(from[0]);
  const int child_writes = above_four(from[1]);
  fs::create_directories(profile_dir);
  const std::string log = (profile_dir / "chromium.log").string();
  std::vector<std::string> argv = {program, "--headless", "--remote-debugging-pipe", "--disable-gpu",
                                   "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                                   "--disable-background-networking", "--user-data-dir=" + profile_dir.string()};
  // Chromium's sandbox refuses to run as root; the tests run as root in containers.
  if (::geteuid() == 0) argv.push_back("--no-sandbox");
  argv.push_back("about:blank");
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child_reads, 3);
  posix_spawn_file_actions_adddup2(&actions, child_writes, 4);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Its own process group, so that stopping it stops its helper processes too.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  if (::posix_spawn(&pid_, program.c_str(), &actions, &attributes, args.data(), environ) != 0) {
    pid_ = -1;
    failed_ = "cannot start " + program;
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(child_reads);
  ::close(child_writes);
}

HeadlessChromium::~HeadlessChromium() {
  if (pid_ > 0 && failed_.empty()) {
    const json close = {{"id", next_id_++}, {"method", "Browser.close"}, {"params", json::object()}};
    const std::string message = close.dump() + '\0';
    [[maybe_unused]] const auto written = ::write(to_browser_, message.data(), message.size());
  }
  if (to_browser_ >= 0) ::close(to_browser_);
  if (from_browser_ >= 0) ::close(from_browser_);
  if (pid_ <= 0) return;
  for (int waited = 0; waited < 100; ++waited) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      ::kill(-pid_, SIGKILL);  // helpers it left behind, if any
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

std::optional<json> HeadlessChromium::next(std::chrono::steady_clock::time_point deadline) {
  while (true) {
    if (const auto end = buffer_.find('\0'); end != std::string::npos) {
      json message = json::parse(buffer_.substr(0, end), nullptr, false);
      buffer_.erase(0, end + 1);
      if (message.is_discarded()) {
        failed_ = "chromium sent a message that is not JSON";
        return std::nullopt;
      }
      return message;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failed_ = "chromium did not answer in time";
      return std::nullopt;
    }
    pollfd ready{from_browser_, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(left.count())) <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(from_browser_, chunk, sizeof chunk);
    if (n <= 0) {
      failed_ = "chromium closed its DevTools pipe (see chromium.log in its profile)";
      return std::nullopt;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

void HeadlessChromium::note(const json& event, const std::string& session, OpenedPage* page) {
  if (page == nullptr || event.value("sessionId", std::string()) != session) return;
  const std::string method = event.value("method", std::string());
  const json& params = event.contains("params") ? event.at("params") : json::object();
  if (method == "Page.loadEventFired") loaded_ = true;
  if (method == "Runtime.consoleAPICalled") {
    const std::string type = params.value("type", std::string());
    if (type == "error" || type == "assert") page->errors.push_back(text_of_console_call(params));
  } else if (method == "Runtime.exceptionThrown") {
    const json& details = params.value("exceptionDetails", json::object());
    page->errors.push_back("uncaught: " + details.value("exception", json::object()).value(
                                              "description", details.value("text", std::string("exception"))));
  } else if (method == "Log.entryAdded") {
    const json& entry = params.value("entry", json::object());
    if (entry.value("level", std::string()) == "error") {
      page->errors.push_back("log (" + entry.value("source", std::string()) + "): " + entry.value("text", std::string()));
    }
  } else if (method == "Network.requestWillBeSent") {
    page->requests.push_back(params.value("request", json::object()).value("url", std::string()));
  }
}

std::optional<json> HeadlessChromium::call(const std::string& method, const json& params, const std::string& session,
                                           OpenedPage* page, std::chrono::steady_clock::time_point deadline) {
  if (!failed_.empty()) return std::nullopt;
  const std::uint64_t id = next_id_++;
  json message = {{"id", id}, {"method", method}, {"params", params}};
  if (!session.empty()) message["sessionId"] = session;
  const std::string text = message.dump() + '\0';
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = ::write(to_browser_, text.data() + sent, text.size() - sent);
    if (n <= 0) {
      failed_ = "cannot write to chromium's DevTools pipe";
      return std::nullopt;
    }
    sent += static_cast<std::size_t>(n);
  }
  while (auto reply = next(deadline)) {
    if (!reply->contains("id")) {
      note(*reply, session_, page);
      continue;
    }
    if (reply->at("id") != id) continue;
    if (reply->contains("error")) {
      failed_ = method + " failed: " + reply->at("error").dump();
      return std::nullopt;
    }
    return reply->value("result", json::object());
  }
  return std::nullopt;
}

std::optional<OpenedPage> HeadlessChromium::open(const std::string& url, const std::string& expression,
                                                 std::chrono::seconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  OpenedPage page;
  auto target = call("Target.createTarget", {{"url", "about:blank"}}, "", nullptr, deadline);
  if (!target) return std::nullopt;
  const std::string target_id = target->value("targetId", std::string());
  auto attached = call("Target.attachToTarget", {{"targetId", target_id}, {"flatten", true}}, "", nullptr, deadline);
  if (!attached) return std::nullopt;
  session_ = attached->value("sessionId", std::string());
  loaded_ = false;
  for (const char* domain : {"Runtime.enable", "Log.enable", "Page.enable", "Network.enable"}) {
    if (!call(domain, json::object(), session_, &page, deadline)) return std::nullopt;
  }
  if (!call("Page.navigate", {{"url", url}}, session_, &page, deadline)) return std::nullopt;
  while (!loaded_) {
    auto event = next(deadline);
    if (!event) return std::nullopt;
    note(*event, session_, &page);
  }
  auto evaluated = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}}, session_, &page,
                        deadline);
  if (!evaluated) return std::nullopt;
  page.value = evaluated->value("result", json::object()).value("value", json());
  if (evaluated->contains("exceptionDetails")) page.errors.push_back("the test's expression threw: " + evaluated->dump());
  if (!call("Target.closeTarget", {{"targetId", target_id}}, "", &page, deadline)) return std::nullopt;
  return page;
}

}  // namespace kiln::testing
