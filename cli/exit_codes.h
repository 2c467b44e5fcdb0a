// The kiln command's exit codes (docs/operations.md) and how an error maps onto them.
#pragma once

#include <iostream>

#include "common/error.h"

namespace kiln::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;       // the job (or verdict) failed
constexpr int kExitUsage = 2;        // bad arguments or configuration
constexpr int kExitRefused = 3;      // not authenticated or not authorized
constexpr int kExitUnreachable = 4;  // no answer from the coordinator
constexpr int kExitNotFound = 5;
// kiln rerun: neither reproduced nor not (3 is already "refused" for every command that talks to
// the coordinator, so a CI step can tell the two apart).
constexpr int kExitInconclusive = 6;

inline int exit_code_for(const Error& e) {
  switch (e.code) {
    case Errc::unauthenticated:
    case Errc::unauthorized: return kExitRefused;
    case Errc::timeout:
    case Errc::unavailable:
    case Errc::standby:
    case Errc::io: return kExitUnreachable;
    case Errc::not_found: return kExitNotFound;
    case Errc::config:
    case Errc::invalid_argument: return kExitUsage;
    default: return kExitFailed;
  }
}

// Prints the error for people and returns its exit code.
inline int report(const Error& e) {
  std::cerr << "kiln: " << e.message << "\n";
  return exit_code_for(e);
}

}  // namespace kiln::cli
