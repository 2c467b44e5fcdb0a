// `kiln compare-tensors GOLDEN ACTUAL --dtype bf16 [--tensor NAME] [--rtol X --atol Y]
//  [--top-k K] [--json]`: the golden comparison the agent runs, for users.
// Exit status: 0 within tolerance, 1 mismatch, 2 input error (the message says what to fix).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace kiln::numerics {

struct CompareTensorsArgs {
  std::string golden_path;
  std::string actual_path;
  std::string dtype;        // empty: the actual tensor's own format
  std::string tensor_name;  // safetensors: tensor to read from both files; empty: the only one
  std::optional<double> rtol;  // rtol and atol are given together or not at all
  std::optional<double> atol;
  std::optional<double> ulps;  // only with rtol and atol
  int top_k = 0;
  bool json = false;
  bool equal_nan = false;
  bool saturate = false;    // fp8: the chip saturates on overflow (golden is rounded the same way)
  size_t max_reported = 10;
};

inline constexpr int compare_exit_pass = 0;
inline constexpr int compare_exit_mismatch = 1;
inline constexpr int compare_exit_input_error = 2;

// Declares the positional arguments and flags on a (sub)command, filling `args` on parse.
void add_compare_tensors_options(CLI::App& command, CompareTensorsArgs& args);

// Reads both files, compares, prints the report (text or JSON) to `out`, errors to `err`.
int run_compare_tensors(const CompareTensorsArgs& args, std::ostream& out, std::ostream& err);

}  // namespace kiln::numerics
