// What every C++ driver backend needs at the ABI's edge (drivers/kiln_driver.h): statuses from
// kiln::Errc, messages copied into fixed buffers, one guard that keeps every exception inside,
// and kernel launches unpacked and computed with the shared kernels (common/numerics/kernels.h).
// Linked into the backends only (the sim's and the CPU reference's), never into the agent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <set>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/numerics/kernels.h"
#include "drivers/kiln_driver.h"

namespace kiln::drivers::backend {

kiln_driver_status code_for(Errc code);

template <std::size_t N>
void copy_fixed(char (&out)[N], const std::string& text) {
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

void copy_error(char* out, std::uint32_t size, const std::string& text);

Status null_argument(const char* what);

// driver_version's body: the version text into the caller's buffer, or too_large.
Status copy_version(std::string_view version, char* out, std::uint32_t out_size);

// Runs one ABI call on a handle that has a `last_error` string: clears it, turns an Error or any
// exception into a status code and message. `backend` names the backend in internal errors.
template <class Handle, class Body>
kiln_driver_status guarded(Handle* handle, const char* backend, Body&& body) noexcept {
  if (handle == nullptr) return KILN_DRIVER_E_INVALID_ARGUMENT;
  try {
    handle->last_error.clear();
    Status status = body(*handle);
    if (status) return KILN_DRIVER_OK;
    handle->last_error = status.error().message;
    return code_for(status.error().code);
  } catch (const std::exception& e) {
    try {
      handle->last_error = std::string("internal error in the ") + backend + ": " + e.what();
    } catch (...) {
    }
    return KILN_DRIVER_E_INTERNAL;
  } catch (...) {
    return KILN_DRIVER_E_INTERNAL;
  }
}

// The kernel options every backend takes in its options string: `broken_kernels=a,b` names the
// kernels whose build under test is broken (the simulated stack's kernel library, docs/driver-abi.md).
// Returns the options without that key.
struct KernelOptions {
  std::string rest;
  std::set<std::string> broken_kernels;
};
Result<KernelOptions> take_kernel_options(std::string_view options);

// Unpacks a launch, checks it, runs the kernel and writes the result (E_BUFFER_TOO_SMALL is
// Errc::too_large with the shape set).
Status run_launch(const numerics::KernelContext& ctx, kiln_kernel_launch& launch);

}  // namespace kiln::drivers::backend
