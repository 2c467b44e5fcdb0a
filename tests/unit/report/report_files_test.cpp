#include <doctest/doctest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "report/report_files.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/report/report_samples.h"

namespace r = kiln::report;
using kiln::testing::read_file;
using kiln::testing::SampleRun;
using kiln::testing::TempDir;

TEST_CASE("a run's files: its JSON and page beside each other, and the index; no temporary file stays") {
  TempDir dir("kiln-report");
  SampleRun earlier;
  earlier.run_id = "nightly-1";
  earlier.started_at_ms -= 86'400'000;
  const nlohmann::json first = kiln::testing::sample_json(earlier);
  REQUIRE(r::write_run_files(dir.path().string(), first, {}).has_value());
  const nlohmann::json second = kiln::testing::sample_json();
  // The other runs as the qualifier knows them: the first, and an older copy of this one.
  const std::vector<r::RunDigest> others = {r::digest_of(first), r::digest_of(first)};
  std::vector<r::RunDigest> with_stale_self = others;
  with_stale_self[1].run_id = "nightly-2";
  REQUIRE(r::write_run_files(dir.path().string(), second, with_stale_self).has_value());

  CHECK(nlohmann::json::parse(read_file(dir.file("nightly-2.json"))) == second);
  const std::string page = read_file(dir.file("nightly-2.html"));
  CHECK(page.find("<a href=\"nightly-1.html\">") != std::string::npos);  // its history
  const std::string index = read_file(dir.file("index.html"));
  CHECK(index.find("<a href=\"nightly-1.html\">nightly-1</a>") != std::string::npos);
  CHECK(index.find("<a href=\"nightly-2.html\">nightly-2</a>") != std::string::npos);
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CHECK(entry.path().filename().string().front() != '.');
    ++files;
  }
  CHECK(files == 5);  // two runs' JSON and pages, and the index
}

TEST_CASE("a directory that cannot be written is a config problem naming it") {
  TempDir dir("kiln-report");
  const std::string file = dir.write("not-a-directory", "x");
  auto prepared = r::prepare_report_directory(file + "/pages");
  REQUIRE_FALSE(prepared.has_value());
  CHECK(prepared.error().code == kiln::Errc::config);
  CHECK(prepared.error().message.find(file + "/pages") != std::string::npos);
  CHECK(r::prepare_report_directory(dir.file("made/here")).has_value());
  CHECK(std::filesystem::is_directory(dir.file("made/here")));
  CHECK(std::filesystem::is_empty(dir.file("made/here")));
  CHECK_FALSE(r::write_file_atomically(file + "/x.html", "text").has_value());
}
