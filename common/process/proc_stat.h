// /proc/PID/stat, read once for every caller: the command's name may hold spaces and
// parentheses, so the fields start after its last ')'.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class ProcStat {
 public:
  // `pid` a number, or "self"; nothing when the process is gone or the line is not stat(5)'s.
  static std::optional<ProcStat> read(const std::string& pid);

  // Field `number` as proc(5) numbers them (3 is the state, 14 utime, 22 starttime, 24 rss), as a
  // number; nothing when absent or not a number.
  std::optional<double> number(std::size_t number) const;
  // Field 3: 'R', 'S', ..., 'Z' for a zombie.
  char state() const { return fields_.empty() || fields_[0].empty() ? '?' : fields_[0][0]; }

 private:
  std::vector<std::string> fields_;  // from field 3
};

}  // namespace kiln
