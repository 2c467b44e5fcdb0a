#include "common/process/installed_file.h"

#include <filesystem>
#include <system_error>

namespace kiln::process {

namespace fs = std::filesystem;

std::string installed_file(std::string_view in_build_tree, std::string_view from_bin) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return fs::path(in_build_tree).filename().string();
  const fs::path built = self.parent_path().parent_path() / in_build_tree;
  if (fs::exists(built, ec)) return built.string();
  return (self.parent_path() / from_bin).lexically_normal().string();
}

}  // namespace kiln::process
