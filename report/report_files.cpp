#include "report/report_files.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::report {

namespace fs = std::filesystem;

Status write_file_atomically(const std::string& path, std::string_view text) {
  // Unique per process and call: the qualifier's runs write index.html from their own threads.
  static std::atomic<std::uint64_t> writes{0};
  const fs::path target(path);
  const fs::path temporary = target.parent_path() / fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(),
                                                                writes.fetch_add(1));
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      const int error = errno;
      std::error_code ignored;
      fs::remove(temporary, ignored);
      return fail(Errc::io, fmt::format("cannot write {} ({}); check that its directory exists and is writable",
                                        temporary.string(), std::strerror(error)));
    }
  }
  std::error_code error;
  fs::rename(temporary, target, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return fail(Errc::io, fmt::format("cannot move {} into place as {}: {}", temporary.string(), path, error.message()));
  }
  return {};
}

Status prepare_report_directory(const std::string& directory) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error || !fs::is_directory(directory)) {
    return fail(Errc::config, fmt::format("[reports] directory {} cannot be made ({}); give a directory the qualifier's "
                                          "user may create and write",
                                          directory, error ? error.message() : "it is not a directory"));
  }
  const std::string probe = (fs::path(directory) / ".kiln-write-check").string();
  if (auto ok = write_file_atomically(probe, "kiln-qualifier checks that it can write here\n"); !ok) {
    return fail(Errc::config, fmt::format("[reports] directory {} is not writable: {}", directory, ok.error().message));
  }
  fs::remove(probe, error);
  return {};
}

Status write_run_files(const std::string& directory, const nlohmann::json& report, std::span<const RunDigest> others) {
  const RunDigest digest = digest_of(report);
  std::vector<RunDigest> runs;
  for (const RunDigest& other : others) {
    if (other.run_id != digest.run_id) runs.push_back(other);
  }
  const fs::path dir(directory);
  const std::string json_text = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (auto ok = write_file_atomically((dir / run_json_name(digest.run_id)).string(), json_text); !ok) return ok;
  if (auto ok = write_file_atomically((dir / run_page_name(digest.run_id)).string(), render_run_page(report, runs)); !ok) {
    return ok;
  }
  runs.push_back(digest);
  return write_file_atomically((dir / "index.html").string(), render_index_page(runs));
}

}  // namespace kiln::report
