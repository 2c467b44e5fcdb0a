#include "common/process/proc_stat.h"

#include <fstream>
#include <sstream>

namespace kiln {

std::optional<ProcStat> ProcStat::read(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const std::size_t paren = line.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(paren + 1));
  ProcStat stat;
  for (std::string field; rest >> field;) stat.fields_.push_back(field);
  if (stat.fields_.empty()) return std::nullopt;
  return stat;
}

std::optional<double> ProcStat::number(std::size_t number) const {
  if (number < 3 || number - 3 >= fields_.size()) return std::nullopt;
  try {
    return std::stod(fields_[number - 3]);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace kiln
