// Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON
// messages ended by NUL on fds 3 and 4), for the tests that open kiln's report pages the way a
// person's browser would: load a page, evaluate an expression in it, and collect what it logged
// (console errors, uncaught exceptions, error log entries) and every URL it requested.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::testing {

struct OpenedPage {
  nlohmann::json value;                // the expression's value
  std::vector<std::string> errors;     // console errors, uncaught exceptions and error log entries
  std::vector<std::string> requests;   // every URL the page asked for, itself included
};

class HeadlessChromium {
 public:
  // The chromium program on the PATH (Debian's `chromium`), or none.
  static std::optional<std::string> find();

  // Starts it with a profile in `profile_dir` (its stderr goes to profile_dir/chromium.log);
  // started() says whether it answers.
  HeadlessChromium(const std::string& program, const std::filesystem::path& profile_dir);
  ~HeadlessChromium();
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;

  bool started() const { return pid_ > 0 && failed_.empty(); }
  // What went wrong talking to it ("" while all is well).
  const std::string& failure() const { return failed_; }

  // Opens `url` in a new tab, waits for its load event, evaluates `expression` (its value
  // returned by value) and closes the tab. None, with failure() saying why, when Chromium does
  // not answer within `patience` or refuses a command.
  std::optional<OpenedPage> open(const std::string& url, const std::string& expression,
                                 std::chrono::seconds patience = std::chrono::seconds(60));

 private:
  std::optional<nlohmann::json> call(const std::string& method, const nlohmann::json& params,
                                     const std::string& session, OpenedPage* page,
                                     std::chrono::steady_clock::time_point deadline);
  // The next message, or none when the deadline passes or the pipe closes (failure() says which).
  std::optional<nlohmann::json> next(std::chrono::steady_clock::time_point deadline);
  void note(const nlohmann::json& event, const std::string& session, OpenedPage* page);

  pid_t pid_ = -1;
  int to_browser_ = -1;
  int from_browser_ = -1;
  std::string buffer_;
  std::uint64_t next_id_ = 1;
  std::string failed_;
  std::string session_;     // the tab being opened
  bool loaded_ = false;     // its load event came
};

}  // namespace kiln::testing
