#include "drivers/backend_support.h"

#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::drivers::backend {

kiln_driver_status code_for(Errc code) {
  switch (code) {
    case Errc::invalid_argument: return KILN_DRIVER_E_INVALID_ARGUMENT;
    case Errc::not_found: return KILN_DRIVER_E_NO_SUCH_CHIP;
    case Errc::config: return KILN_DRIVER_E_CONFIG;
    case Errc::io: return KILN_DRIVER_E_IO;
    case Errc::unavailable: return KILN_DRIVER_E_BUSY;
    case Errc::conflict: return KILN_DRIVER_E_STATE;
    case Errc::device: return KILN_DRIVER_E_DEVICE;
    case Errc::integrity: return KILN_DRIVER_E_FIRMWARE;
    case Errc::too_large: return KILN_DRIVER_E_BUFFER_TOO_SMALL;
    default: return KILN_DRIVER_E_INTERNAL;
  }
}

void copy_error(char* out, std::uint32_t size, const std::string& text) {
  if (out == nullptr || size == 0) return;
  const std::size_t n = std::min<std::size_t>(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

Status null_argument(const char* what) {
  return fail(Errc::invalid_argument, std::string(what) + " is NULL; pass a valid pointer");
}

Status copy_version(std::string_view version, char* out, std::uint32_t out_size) {
  if (out == nullptr) return null_argument("out");
  if (out_size <= version.size()) {
    return fail(Errc::too_large, fmt::format("version buffer of {} bytes is too small; pass at least {}", out_size,
                                             version.size() + 1));
  }
  std::memcpy(out, version.data(), version.size());
  out[version.size()] = '\0';
  return {};
}

namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    const auto at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) break;
    text.remove_prefix(at + 1);
  }
  return parts;
}

}  // namespace

Result<KernelOptions> take_kernel_options(std::string_view options) {
  constexpr std::string_view kKey = "broken_kernels=";
  KernelOptions out;
  for (std::string_view part : split(options, ';')) {
    if (!part.starts_with(kKey)) {
      if (!out.rest.empty()) out.rest += ';';
      out.rest += part;
      continue;
    }
    for (std::string_view name : split(part.substr(kKey.size()), ',')) {
      const auto& known = numerics::kernel_components();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        return fail(Errc::config, fmt::format("broken_kernels names '{}', which is not a kernel; use names from {}",
                                              name, fmt::join(known, ", ")));
      }
      out.broken_kernels.emplace(name);
    }
  }
  return out;
}

Status run_launch(const numerics::KernelContext& ctx, kiln_kernel_launch& launch) {
  if (launch.input_count > KILN_KERNEL_INPUTS_MAX) {
    return fail(Errc::invalid_argument, fmt::format("input_count is {}; a kernel takes at most {} inputs",
                                                    launch.input_count, KILN_KERNEL_INPUTS_MAX));
  }
  if ((launch.flags & ~(KILN_KERNEL_FLAG_CAUSAL | KILN_KERNEL_FLAG_TRANSPOSE_B)) != 0) {
    return fail(Errc::invalid_argument, fmt::format("unknown kernel flags {:#x}; use KILN_KERNEL_FLAG_*", launch.flags));
  }
  numerics::KernelLaunch call;
  call.kernel.assign(launch.kernel, strnlen(launch.kernel, sizeof(launch.kernel)));
  call.causal = (launch.flags & KILN_KERNEL_FLAG_CAUSAL) != 0;
  call.transpose_b = (launch.flags & KILN_KERNEL_FLAG_TRANSPOSE_B) != 0;
  for (std::uint32_t i = 0; i < launch.input_count; ++i) {
    const kiln_kernel_matrix& in = launch.inputs[i];
    if (in.data == nullptr) return null_argument("a kernel input's data");
    // A bound on what a unit test needs, so a wrong shape cannot ask for gigabytes.
    constexpr std::uint64_t kMaxValues = 1u << 24;
    if (in.rows == 0 || in.cols == 0 || static_cast<std::uint64_t>(in.rows) * in.cols > kMaxValues) {
      return fail(Errc::invalid_argument, fmt::format("kernel input {} is {}x{}; give 1 to {} values", i, in.rows,
                                                      in.cols, kMaxValues));
    }
    numerics::Matrix m(static_cast<int>(in.rows), static_cast<int>(in.cols));
    std::copy(in.data, in.data + m.data.size(), m.data.begin());
    call.inputs.push_back(std::move(m));
  }
  auto result = numerics::run_kernel(ctx, call);
  if (!result) return tl::unexpected(result.error());
  launch.output_rows = static_cast<std::uint32_t>(result->rows);
  launch.output_cols = static_cast<std::uint32_t>(result->cols);
  if (launch.output_capacity < result->data.size()) {
    return fail(Errc::too_large, fmt::format("the output holds {} values; kernel {} needs {} ({}x{})",
                                             launch.output_capacity, call.kernel, result->data.size(), result->rows,
                                             result->cols));
  }
  if (launch.output == nullptr) return null_argument("output");
  std::copy(result->data.begin(), result->data.end(), launch.output);
  return {};
}

}  // namespace kiln::drivers::backend
