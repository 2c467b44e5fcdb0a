// Helpers shared by the fuzz targets. Each target is one KILN_FUZZ_ENTRY(NAME); the same
// source builds against libFuzzer (build-fuzz/) and against corpus_replay_main.cpp (ctest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

// libFuzzer's entry point; in the replay, a function named for the target, so that every target
// links into one executable and its sources compile in unity batches like the rest of kiln.
#ifdef KILN_FUZZ_REPLAY
#define KILN_FUZZ_ENTRY(name) extern "C" int kiln_fuzz_##name(const std::uint8_t* data, std::size_t size)
#else
#define KILN_FUZZ_ENTRY(name) extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
#endif

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
