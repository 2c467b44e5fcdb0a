#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/stats/compare_cli.h"
#include "common/stats/rng.h"
#include "common/stats/samples_file.h"
#include "tests/support/temp_dir.h"

using namespace kiln::stats;

namespace {

using kiln::testing::TempDir;

std::string series(double centre, int n, std::uint64_t seed) {
  Rng rng(seed);
  std::ostringstream out;
  out << "# throughput, tokens/s\n";
  for (int i = 0; i < n; ++i) out << centre * (1 + 0.01 * rng.normal()) << (i % 3 == 2 ? "\n" : ", ");
  return out.str();
}

}  // namespace

TEST_CASE("sample text: whitespace, commas, newlines and comments") {
  auto samples = parse_samples("# header\n1, 2 3\n\t4.5e1 # trailing\r\n+5,-6\n", "t.txt");
  REQUIRE(samples);
  CHECK(*samples == std::vector<double>{1, 2, 3, 45, 5, -6});
}

TEST_CASE("sample text errors name the source and the line") {
  auto bad = parse_samples("1\n2\n3 abc 4\n", "base.txt");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == kiln::Errc::invalid_argument);
  CHECK(bad.error().message.find("base.txt:3:") != std::string::npos);
  CHECK(bad.error().message.find("'abc'") != std::string::npos);

  auto nan = parse_samples("1\nnan\n", "c.txt");
  REQUIRE_FALSE(nan);
  CHECK(nan.error().message.find("c.txt:2:") != std::string::npos);
  CHECK(nan.error().message.find("finite") != std::string::npos);

  auto partial = parse_samples("12ms\n", "c.txt");
  REQUIRE_FALSE(partial);
  CHECK(partial.error().message.find("'12ms'") != std::string::npos);

  auto empty = parse_samples("# nothing here\n\n", "e.txt");
  REQUIRE_FALSE(empty);
  CHECK(empty.error().message.find("no samples") != std::string::npos);

  auto missing = read_samples_file("/nonexistent/kiln/base.txt");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == kiln::Errc::io);
  CHECK(missing.error().message.find("/nonexistent/kiln/base.txt") != std::string::npos);
}

TEST_CASE("kiln compare: exit codes and JSON") {
  TempDir dir;
  const std::string base = dir.write("base.txt", series(1000, 15, 1));
  const std::string slower = dir.write("slower.txt", series(950, 15, 2));
  const std::string same = dir.write("same.txt", series(1000, 15, 3));
  const std::string few = dir.write("few.txt", "1000 1001 999 1002");
  const std::string broken = dir.write("broken.txt", "1000\n1001\nx\n");

  CompareSamplesArgs args;
  args.baseline_path = base;
  args.candidate_path = slower;
  std::ostringstream out;
  std::ostringstream err;
  CHECK(run_compare_samples(args, out, err) == kCompareExitRegression);
  CHECK(out.str().find("verdict    regression") != std::string::npos);
  CHECK(out.str().find("exact") != std::string::npos);

  args.json = true;
  out.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitRegression);
  const auto j = nlohmann::json::parse(out.str());
  CHECK(j["verdict"] == "regression");
  CHECK(j["test"]["method"] == "exact");
  CHECK(j["shift"]["relative"].get<double>() < -0.03);
  CHECK(j["shift"]["interval"]["high"].get<double>() < 0);
  CHECK(j["shift"]["bootstrap_interval"]["resamples"] == 2000);
  CHECK(j["exit_code"] == 1);

  // A latency file read the other way round is an improvement, not a regression.
  args.json = false;
  args.higher_is_better = false;
  out.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitNoRegression);
  CHECK(out.str().find("improvement") != std::string::npos);

  args.higher_is_better = true;
  args.candidate_path = same;
  out.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitNoRegression);

  // 4 a side: no test can reach p <= 0.01 (two-sided floor 1/35), whatever the data say.
  args.baseline_path = few;
  args.candidate_path = dir.write("few_slower.txt", "900 901 899 902");
  out.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitInconclusive);
  CHECK(out.str().find("smallest p 0.02857") != std::string::npos);

  // 15 against 4: the 99.9% interval is the whole range of differences, too wide to exclude 2%.
  args.baseline_path = base;
  args.candidate_path = few;
  out.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitInconclusive);

  args.candidate_path = broken;
  out.str("");
  err.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitInputError);
  CHECK(err.str().find("broken.txt:3:") != std::string::npos);

  args.candidate_path = same;
  args.min_effect = 2;  // a common slip: percent instead of a fraction
  err.str("");
  CHECK(run_compare_samples(args, out, err) == kCompareExitInputError);
  CHECK(err.str().find("min_effect") != std::string::npos);
}
