// What the tests of release gates share: a run's report as `kiln run` prints it, and an
// environments repository whose one environment requires a gate, so that `kiln release promote`
// decides on a run the real qualifier recorded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/git_repo.h"

namespace kiln::testing {

// The run's report as recorded (`kiln run` exits 1 for a failed run).
inline nlohmann::json run_report(Fleet& fleet, const std::string& run_id) {
  std::string out;
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"run", run_id, "--json"}, &out, &err) <= 1);
  return nlohmann::json::parse(out);
}

inline const nlohmann::json& model_of(const nlohmann::json& report, const std::string& model) {
  for (const auto& entry : report.at("models")) {
    if (entry.at("model") == model) return entry;
  }
  FAIL("no model run of " << model);
  return report;
}

inline bool has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("expected '" << part << "' in:\n" << text);
  return false;
}

// An environments repository (docs/releases.md) with the candidate's file, added by `kiln release
// add-bundle`, and one environment that requires the gate `gate` (nightly or release).
inline std::filesystem::path environments_repo(Fleet& fleet, const std::string& bundle, const std::string& gate) {
  namespace fs = std::filesystem;
  const fs::path repo = fleet.dir() / "environments";
  fs::create_directories(repo / "environments");
  git_out(repo, {"init", "-q", "-b", "main"});
  write(repo / "compatibility.toml", "[[combination]]\nhardware_revision = \"a\"\nfirmware = [\"*\"]\n"
                                     "driver = [\"*\"]\nruntime = [\"*\"]\n");
  write(repo / "environments" / "serving.toml", "bundle = \"\"\nrequires = [\"" + gate + "\"]\nnodes = [\"n01\"]\n");
  git_out(repo, {"add", "-A"});
  git_out(repo, {"commit", "-q", "-m", "environments"});
  std::vector<std::string> args = {"release", "add-bundle", "--repo", repo.string(), bundle.substr(0, 12)};
  fs::create_directories(fleet.dir() / "packages");
  for (const char* layer : {"framework", "compiler", "kernels", "runtime", "driver", "firmware"}) {
    write(fleet.dir() / "packages" / layer, std::string("package of ") + layer);
    args.push_back("--package");
    args.push_back(std::string(layer) + "=" + (fleet.dir() / "packages" / layer).string());
  }
  std::string out;
  INFO(out);
  REQUIRE(fleet.kiln("ci", args, &out) == 0);
  return repo;
}

}  // namespace kiln::testing
