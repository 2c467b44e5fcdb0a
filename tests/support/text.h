// Small text helpers the tests share.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::testing {

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The whole file, bytes as they are; empty when it cannot be read.
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace kiln::testing
