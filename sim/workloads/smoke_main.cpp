// kiln-workload-smoke: the quickest end-to-end check that a node can run work. Through the
// chip driver (the same ABI a real chip's library implements) it binds the job's chips,
// reads each chip's identity and telemetry, runs a small matrix product and checks it
// against a reference computed independently, then writes a result document.
// The contract of arguments, environment and result file is docs/workloads.md.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/version.h"
#include "drivers/loader.h"

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::vector<std::uint32_t> parse_chips(const std::string& text) {
  std::vector<std::uint32_t> chips;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    chips.push_back(static_cast<std::uint32_t>(std::stoul(text.substr(start, end - start))));
    start = end + 1;
  }
  return chips;
}

// A matrix product in fp32 against an fp64 reference: they agree within fp32 rounding, never
// bitwise, which is what a golden comparison has to tolerate. Each element's error is scaled by
// sum_k |a_ik * b_kj|, the quantity the rounding error of a dot product is bounded by
// (n * 2^-24 times it), so elements that cancel to near zero are judged fairly.
double max_scaled_error(int n, std::uint64_t seed) {
  std::vector<float> a(n * n), b(n * n);
  std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (auto* m : {&a, &b}) {
    for (auto& x : *m) {
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      x = static_cast<float>((s >> 40) % 2000) / 1000.0f - 1.0f;
    }
  }
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      float forward = 0;
      for (int k = 0; k < n; ++k) forward += a[i * n + k] * b[k * n + j];
      double reference = 0;
      double magnitude = 0;
      for (int k = n - 1; k >= 0; --k) {
        const double term = static_cast<double>(a[i * n + k]) * b[k * n + j];
        reference += term;
        magnitude += std::abs(term);
      }
      worst = std::max(worst, std::abs(forward - reference) / (magnitude + 1e-30));
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("%s\n", kiln::version_text("kiln-workload-smoke").c_str());
    return 0;
  }
  const std::string library = env_or("KILN_DRIVER_LIBRARY", "");
  const std::string result_file = env_or("KILN_RESULT_FILE", "result.json");
  const auto chips = parse_chips(env_or("KILN_CHIPS", "0"));
  const std::uint64_t seed = std::strtoull(env_or("KILN_SEED", "1").c_str(), nullptr, 10);
  if (library.empty()) {
    std::fprintf(stderr, "smoke: KILN_DRIVER_LIBRARY is not set; run me through kiln-agent\n");
    return 2;
  }
  auto driver = kiln::drivers::Driver::load(library, env_or("KILN_DRIVER_OPTIONS", ""));
  if (!driver) {
    std::fprintf(stderr, "smoke: %s\n", driver.error().message.c_str());
    return 2;
  }
  auto capabilities = (*driver)->capabilities();
  if (!capabilities) {
    std::fprintf(stderr, "smoke: %s\n", capabilities.error().message.c_str());
    return 2;
  }
  // A backend without bindings or firmware (the CPU's) is smoke-tested on what it has.
  if (capabilities->bindings) {
    if (auto bound = (*driver)->bind_workload(::getpid(), chips); !bound) {
      std::fprintf(stderr, "smoke: cannot bind chips: %s\n", bound.error().message.c_str());
      return 2;
    }
  }
  nlohmann::json result;
  result["schema"] = "kiln.workload-result/1";
  result["workload"] = "smoke";
  result["model"] = "smoke";
  result["dtype"] = "fp32";
  result["status"] = "completed";
  bool healthy = true;
  for (std::uint32_t chip : chips) {
    auto id = (*driver)->chip_identity(chip);
    auto telemetry = (*driver)->chip_telemetry(chip);
    auto firmware = capabilities->firmware_slots ? (*driver)->firmware_slots(chip)
                                                 : kiln::Result<kiln::drivers::FirmwareSlots>(kiln::drivers::FirmwareSlots{});
    if (!id || !telemetry || !firmware) {
      std::fprintf(stderr, "smoke: chip %u does not answer: %s\n", chip,
                   (!id ? id.error() : !telemetry ? telemetry.error() : firmware.error()).message.c_str());
      return 2;
    }
    const bool ok = (!capabilities->link || telemetry->link_up) &&
                    (!capabilities->ecc || telemetry->ecc_uncorrected == 0);
    healthy = healthy && ok;
    result["chips"].push_back({{"index", chip},
                               {"serial", id->serial},
                               {"hardware_revision", id->hardware_revision},
                               {"firmware", firmware->active_version()},
                               {"temperature_c", telemetry->temperature_c},
                               {"link_up", telemetry->link_up},
                               {"ecc_uncorrected", telemetry->ecc_uncorrected}});
    std::printf("chip %u %s fw %s: %.1f C, link %s, uncorrected ECC %llu\n", chip, id->serial.c_str(),
                firmware->active_version().c_str(), telemetry->temperature_c, telemetry->link_up ? "up" : "DOWN",
                static_cast<unsigned long long>(telemetry->ecc_uncorrected));
  }
  const double disagreement = max_scaled_error(48, seed);
  const bool numerics_ok = disagreement < 1e-4;
  result["matmul_max_scaled_error"] = disagreement;
  result["passed"] = healthy && numerics_ok;
  std::printf("matmul 48x48 fp32 vs fp64 reference: max error %.3g of sum |a*b| (%s)\n", disagreement,
              numerics_ok ? "within 1e-4" : "OUT OF TOLERANCE");
  if (capabilities->bindings) (void)(*driver)->unbind_workload(::getpid());
  std::ofstream(result_file) << result.dump() << "\n";
  return healthy && numerics_ok ? 0 : 1;
}
