// Feeds every file of the committed seed corpus to its fuzz target, compiled with the default
// compiler and without libFuzzer, so that the targets keep building and the inputs that once
// crashed keep passing. Usage: kiln-fuzz-replay CORPUS_DIR [TARGET [FILE...]]
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#define KILN_FUZZ_TARGET(name) extern "C" int kiln_fuzz_##name(const std::uint8_t* data, std::size_t size);
#include "common/version.h"
#include "fuzz_targets.inc"
#undef KILN_FUZZ_TARGET

namespace {

struct Target {
  std::string_view name;
  int (*run)(const std::uint8_t*, std::size_t);
};

#define KILN_FUZZ_TARGET(name) Target{#name, kiln_fuzz_##name},
constexpr Target kTargets[] = {
#include "fuzz_targets.inc"
};
#undef KILN_FUZZ_TARGET

void run_file(const Target& target, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  target.run(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string_view(argv[1]) == "--version") {
    std::printf("%s\n", kiln::version_text("kiln-fuzz-replay").c_str());
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: kiln-fuzz-replay CORPUS_DIR [TARGET [FILE...]]\n");
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  const std::string_view only = argc > 2 ? argv[2] : "";
  int failures = 0;
  bool matched = false;
  for (const Target& target : kTargets) {
    if (!only.empty() && target.name != only) continue;
    matched = true;
    if (argc > 3) {
      for (int i = 3; i < argc; ++i) run_file(target, argv[i]);
      std::printf("%s: %d inputs\n", std::string(target.name).c_str(), argc - 3);
      continue;
    }
    const std::filesystem::path dir = corpus / target.name;
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(dir)) {
      for (const auto& item : std::filesystem::directory_iterator(dir)) {
        if (item.is_regular_file()) files.push_back(item.path());
      }
    }
    // A target without seeds would pass here while testing nothing.
    if (files.empty()) {
      std::fprintf(stderr, "%s: no seed inputs in %s; run `scripts/fuzz corpus` to generate them\n",
                   std::string(target.name).c_str(), dir.c_str());
      ++failures;
      continue;
    }
    for (const auto& file : files) run_file(target, file);
    std::printf("%s: %zu inputs\n", std::string(target.name).c_str(), files.size());
  }
  if (!matched) {
    std::fprintf(stderr, "no fuzz target named '%s'\n", std::string(only).c_str());
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
