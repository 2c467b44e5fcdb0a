// What a command says while it waits longer than a few seconds: its status and the time so far.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "common/time.h"

namespace kiln {

// Shows a wait's status. On a terminal: one line, rewritten in place, cut to the terminal's width,
// with the time so far. Elsewhere (a CI log, a pipe): a plain line whenever the status changes,
// and again every minute while it does not, so a log shows the wait is alive.
class ProgressLine {
 public:
  ProgressLine(std::ostream& out, bool terminal, std::size_t width = 0);
  // For standard error, a terminal when it is one.
  static ProgressLine for_stderr();
  ~ProgressLine();

  void show(const std::string& status, DurationMs elapsed_ms, TimeMs now_ms);
  // Several lines of status (run_status_lines): a terminal shows the first two on its one line.
  void show_lines(const std::vector<std::string>& lines, DurationMs elapsed_ms, TimeMs now_ms);
  // Ends the updating line (a terminal's is cleared); later output starts on a clean line.
  void done();

 private:
  std::ostream& out_;
  bool terminal_;
  std::size_t width_;
  std::string shown_;
  TimeMs shown_at_ms_ = 0;
  bool line_open_ = false;
};

}  // namespace kiln
