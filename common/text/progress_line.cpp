#include "common/text/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/text/duration_text.h"

namespace kiln {

namespace {

// Non-terminal output repeats an unchanged status this often, so a log shows the wait is alive.
constexpr DurationMs kPlainRepeatMs = 60 * kSecondMs;

}  // namespace

ProgressLine::ProgressLine(std::ostream& out, bool terminal, std::size_t width)
    : out_(out), terminal_(terminal), width_(width) {}

ProgressLine ProgressLine::for_stderr() {
  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  std::size_t width = 0;
  winsize size{};
  if (terminal && ::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0) width = size.ws_col;
  return ProgressLine(std::cerr, terminal, width);
}

ProgressLine::~ProgressLine() { done(); }

void ProgressLine::show(const std::string& status, DurationMs elapsed_ms, TimeMs now_ms) {
  std::string line = fmt::format("{} ({} so far)", status, duration_text(static_cast<std::uint64_t>(elapsed_ms)));
  if (terminal_) {
    if (width_ > 1 && line.size() >= width_) line = line.substr(0, width_ - 2) + "~";
    out_ << "\r\033[K" << line << std::flush;
    line_open_ = true;
    return;
  }
  if (status == shown_ && now_ms - shown_at_ms_ < kPlainRepeatMs) return;
  out_ << line << "\n" << std::flush;
  shown_ = status;
  shown_at_ms_ = now_ms;
}

void ProgressLine::show_lines(const std::vector<std::string>& lines, DurationMs elapsed_ms, TimeMs now_ms) {
  if (lines.empty()) return;
  if (terminal_) {
    show(lines.size() > 1 ? lines[0] + " | " + lines[1] : lines[0], elapsed_ms, now_ms);
  } else {
    show(fmt::format("{}", fmt::join(lines, "\n  ")), elapsed_ms, now_ms);
  }
}

void ProgressLine::done() {
  if (terminal_ && line_open_) out_ << "\r\033[K" << std::flush;
  line_open_ = false;
}

}  // namespace kiln
