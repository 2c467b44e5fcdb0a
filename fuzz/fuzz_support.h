// Helpers shared by the fuzz targets. Each target is one LLVMFuzzerTestOneInput; the same
// source builds against libFuzzer (build-fuzz/) and against corpus_replay_main.cpp (ctest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace kiln::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property of the code under test failed: report it and abort, so that libFuzzer keeps the
// input and the replay test fails.
[[noreturn]] inline void violated(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

}  // namespace kiln::fuzz
