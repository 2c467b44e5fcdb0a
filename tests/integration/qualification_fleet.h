// The qualification tests' fleet: a CI key, nodes of revision a (two, or as many as asked), the
// model set, the change history and the goldens in the fleet's directory, and qualifiers (not started yet).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/git_repo.h"
#include "tests/integration/qualification_samples.h"

namespace kiln::testing {

inline std::string read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::string first_word_after(const std::string& text, const std::string& prefix) {
  auto at = text.find(prefix);
  if (at == std::string::npos) return "";
  at += prefix.size();
  return text.substr(at, text.find_first_of(" \n", at) - at);
}

// Tonight's nightly brought forward: a qualifier [schedule] (revision a, from 00:00, due 07:00 UTC)
// whose clock reads 00:00:30 UTC of the next night, so the qualifier asks for the night's run at once.
struct Tonight {
  std::string run_id;          // nightly-YYYY-MM-DD of the next night
  std::string schedule_table;  // the [schedule] table for qualifier.toml
  std::int64_t now_ms = 0;     // the wall clock when it was made
};

inline Tonight tonight_starting_now() {
  using namespace std::chrono;
  Tonight tonight;
  tonight.now_ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  const std::int64_t day_ms = 24 * 3600 * 1000;
  const std::int64_t midnight_ms = (tonight.now_ms / day_ms + 1) * day_ms;
  const year_month_day night{sys_days{days{midnight_ms / day_ms}}};
  char date[16];
  std::snprintf(date, sizeof date, "%04d-%02u-%02u", static_cast<int>(night.year()),
                static_cast<unsigned>(night.month()), static_cast<unsigned>(night.day()));
  tonight.run_id = std::string("nightly-") + date;
  tonight.schedule_table = "[schedule]\nnightly_start = \"00:00\"\nnightly_deadline = \"07:00\"\nrevisions = [\"a\"]\n"
                           "clock_offset_ms = " + std::to_string(midnight_ms - tonight.now_ms + 30000) + "\n";
  return tonight;
}

// A register (over models.toml) of one hardware risk gating `model`'s correctness in `tier`, paging
// the hardware team, as the shipped register's hardware-fp8-rounding gates a model's.
inline std::string hardware_risk_register(const std::string& model, const std::string& tier) {
  return R"(
model_set = "models.toml"

[[team]]
name = "hardware"
approvers = ["dana"]

[[risk]]
id = "hardware-bf16-rounding"
title = "a revision's matrix unit rounds bf16 differently from the reference"
owner_team = "hardware"
layer = "hardware"
tier = ")" + tier + R"("
gate = { model = ")" + model + R"(", metric = "correctness" }
page = { team = "hardware", severity = "sev2" }
)";
}

// `node_count` nodes of revision a, n01, n02, ...; each qualifier named gets these settings and
// tables (Fleet::add_qualifier).
inline void start_nodes(Fleet& fleet, int node_count, const std::map<std::string, std::string>& qualifier_settings = {},
                        const std::vector<std::string>& qualifiers = {"qualifier"},
                        const std::string& qualifier_tables = "") {
  fleet.add_key("ci", "ci");
  for (const auto& name : qualifiers) fleet.add_qualifier(name, qualifier_settings, qualifier_tables);
  std::vector<std::string> nodes;
  for (int n = 1; n <= node_count; ++n) nodes.push_back((n < 10 ? "n0" : "n") + std::to_string(n));
  for (const auto& node : nodes) fleet.add_agent({node, "a"});
  fleet.start_coordinator();
  for (const auto& node : nodes) fleet.start_agent(node);
  const std::filesystem::path dir = fleet.dir();
  write(dir / "models.toml", kModelSet);
  write(dir / "history.toml", kHistory);
  for (const char* model : {"mlp-bf16", "mlp-fp8"}) {
    const std::string command = std::string(KILN_BIN_DIR) + "/kiln-workload-model --model " + model +
                                " --data-seed 1 --write-golden " + (dir / "golden").string() + " >/dev/null";
    REQUIRE(std::system(command.c_str()) == 0);
  }
  std::string out;
  const auto all_registered = [&] {
    if (fleet.kiln("ci", {"nodes"}, &out) != 0) return false;
    return std::all_of(nodes.begin(), nodes.end(), [&](const auto& node) { return out.find(node) != std::string::npos; });
  };
  REQUIRE(Fleet::eventually(all_registered, std::chrono::seconds(20)));
}

inline void start_two_nodes(Fleet& fleet, const std::map<std::string, std::string>& qualifier_settings = {},
                            const std::vector<std::string>& qualifiers = {"qualifier"}) {
  start_nodes(fleet, 2, qualifier_settings, qualifiers);
}

// The history recorded, the bundle at k1 accepted as the baseline; returns the bundle at `at`
// (empty: the latest change).
inline std::string prepare_bundles(Fleet& fleet, const std::string& at = "") {
  const std::filesystem::path dir = fleet.dir();
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);
  std::vector<std::string> build = {"bundle", "build", "--rev", "a", "--bundle-dir", (dir / "bundles").string()};
  if (!at.empty()) build.insert(build.end(), {"--at", at});
  REQUIRE(fleet.kiln("ci", build, &out) == 0);
  return first_word_after(out, "bundle ");
}

}  // namespace kiln::testing
