#include "common/numerics/compare_cli.h"

#include <ostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/numerics/compare.h"
#include "common/numerics/tensor_io.h"

namespace kiln::numerics {
namespace {

int input_error(std::ostream& err, const std::string& message) {
  err << "kiln compare-tensors: " << message << "\n";
  return compare_exit_input_error;
}

Result<CompareOptions> options_from(const CompareTensorsArgs& args, const Tensor& actual) {
  CompareOptions options;
  options.dtype = actual.dtype;
  if (!args.dtype.empty()) {
    auto dtype = parse_dtype(args.dtype);
    if (!dtype) {
      return tl::unexpected(dtype.error());
    }
    options.dtype = *dtype;
  }
  if (args.rtol.has_value() != args.atol.has_value()) {
    return fail(Errc::invalid_argument, "give both --rtol and --atol, or neither to use the defaults for the dtype");
  }
  if (args.ulps && !args.rtol) {
    return fail(Errc::invalid_argument, "--ulps replaces part of the default tolerance; give it with --rtol and --atol");
  }
  if (args.rtol) {
    const Tolerance tolerance{*args.rtol, *args.atol, args.ulps.value_or(0.0)};
    if (!(tolerance.rtol >= 0) || !(tolerance.atol >= 0) || !(tolerance.ulps >= 0)) {
      return fail(Errc::invalid_argument, "--rtol, --atol and --ulps must be non-negative numbers");
    }
    options.tolerance = tolerance;
  }
  if (args.top_k < 0) {
    return fail(Errc::invalid_argument, "--top-k must be positive (or 0 to skip it)");
  }
  options.top_k = args.top_k;
  options.max_reported = args.max_reported;
  options.equal_nan = args.equal_nan;
  options.saturation = args.saturate ? Saturation::saturating : Saturation::non_saturating;
  return options;
}

}  // namespace

void add_compare_tensors_options(CLI::App& command, CompareTensorsArgs& args) {
  command.add_option("golden", args.golden_path, "golden reference tensor (.npy or .safetensors)")->required();
  command.add_option("actual", args.actual_path, "tensor to check (.npy or .safetensors)")->required();
  command.add_option("--dtype", args.dtype,
                     "format the actual tensor was computed in: fp32, fp16, bf16, fp8_e4m3, fp8_e5m2 "
                     "(default: the actual file's own; needed for raw bf16/fp8 .npy files)");
  command.add_option("--tensor", args.tensor_name, "tensor name inside .safetensors files");
  command.add_option("--rtol", args.rtol, "relative tolerance (with --atol; default per dtype)");
  command.add_option("--atol", args.atol, "absolute tolerance (with --rtol)");
  command.add_option("--ulps", args.ulps, "extra allowance in ulps of the dtype (with --rtol and --atol)");
  command.add_option("--top-k", args.top_k, "logits: also report top-k agreement over the last dimension");
  command.add_option("--max-reported", args.max_reported, "worst elements to list (default 10)");
  command.add_flag("--json", args.json, "print the report as JSON");
  command.add_flag("--equal-nan", args.equal_nan, "count NaN against NaN as a match");
  command.add_flag("--saturate", args.saturate, "fp8: the chip saturates on overflow instead of NaN/inf");
}

int run_compare_tensors(const CompareTensorsArgs& args, std::ostream& out, std::ostream& err) {
  ReadOptions read;
  if (!args.dtype.empty()) {
    auto dtype = parse_dtype(args.dtype);
    if (!dtype) {
      return input_error(err, dtype.error().message);
    }
    read.raw_dtype = *dtype;
  }
  if (!args.tensor_name.empty()) {
    read.tensor_name = args.tensor_name;
  }
  auto golden = read_tensor_file(args.golden_path, read);
  if (!golden) {
    return input_error(err, "golden: " + golden.error().message);
  }
  auto actual = read_tensor_file(args.actual_path, read);
  if (!actual) {
    return input_error(err, "actual: " + actual.error().message);
  }
  auto options = options_from(args, *actual);
  if (!options) {
    return input_error(err, options.error().message);
  }
  auto report = compare(*golden, *actual, *options);
  if (!report) {
    return input_error(err, report.error().message);
  }
  if (args.json) {
    nlohmann::json json = report_to_json(*report);
    json["golden"] = args.golden_path;
    json["actual"] = args.actual_path;
    out << json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    out << format_report_text(*report) << "golden " << args.golden_path << "\nactual " << args.actual_path << "\n";
  }
  return report->passed ? compare_exit_pass : compare_exit_mismatch;
}

}  // namespace kiln::numerics
