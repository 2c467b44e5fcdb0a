// Helpers shared by the fuzz targets. Each target is one LLVMFuzzerTestOneInput; the same
// source builds against libFuzzer (build-fuzz/) and against corpus_replay_main.cpp (ctest).
#pragma once

#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
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

// One directory per process for the loaders that only take paths. It is removed at exit;
// libFuzzer runs one input at a time, so each input overwrites the previous file.
class ScratchDir {
 public:
  static const ScratchDir& get() {
    static const ScratchDir dir;
    return dir;
  }
  const std::filesystem::path& path() const { return path_; }

  // Writes `bytes` to NAME inside the directory and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file.string();
  }

  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

 private:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) violated("cannot create a scratch directory under TMPDIR");
    path_ = pattern;
  }
  std::filesystem::path path_;
};

}  // namespace kiln::fuzz
