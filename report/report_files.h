// The report pages as static files beside the run's JSON. Each file is written under a temporary
// name in its directory and renamed into place, so a reader (a browser, an HTTP server) sees the
// old file or the new one, never half of one.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "report/pages.h"

namespace kiln::report {

Status write_file_atomically(const std::string& path, std::string_view text);

// Creates the directory when missing and checks that files can be written and renamed there
// (Errc::config, naming the directory, otherwise).
Status prepare_report_directory(const std::string& directory);

// <run>.json, <run>.html and index.html in `directory`. `others`: the other runs' digests (an
// entry for this run among them is replaced by the report's).
Status write_run_files(const std::string& directory, const nlohmann::json& report, std::span<const RunDigest> others);

}  // namespace kiln::report
