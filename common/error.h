// Expected failures as values. Every component reports what the world can do to it as a
// kiln::Error inside tl::expected; programmer errors are KILN_ASSERT and abort.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <tl/expected.hpp>

#include "common/enum_names.h"

namespace kiln {

enum class Errc {
  invalid_argument,     // the caller gave a value outside what is accepted
  bad_message,          // malformed, truncated or wrongly typed wire data
  unsupported_version,  // protocol version neither side can speak
  too_large,            // over a configured size limit
  not_found,
  already_exists,
  unauthorized,         // the peer's role may not do this
  unauthenticated,      // the peer's key is unknown
  config,               // a configuration file is invalid
  io,                   // file system, socket or database failure
  timeout,
  device,               // the chip driver reported a failure
  unavailable,          // a resource is temporarily not there (busy, quarantined, no capacity)
  not_registered,       // an agent spoke before (re)registering: it must send hello
  conflict,             // the request contradicts current state
  integrity,            // digest mismatch, tampered data
  internal,             // a dependency failed in a way we cannot classify
  standby,              // a standby coordinator: nothing was done; ask the next coordinator listed
};
constexpr EnumTable<Errc, 18> enum_names(Errc) {
  return {{
      {Errc::invalid_argument, "invalid_argument"},
      {Errc::bad_message, "bad_message"},
      {Errc::unsupported_version, "unsupported_version"},
      {Errc::too_large, "too_large"},
      {Errc::not_found, "not_found"},
      {Errc::already_exists, "already_exists"},
      {Errc::unauthorized, "unauthorized"},
      {Errc::unauthenticated, "unauthenticated"},
      {Errc::config, "config"},
      {Errc::io, "io"},
      {Errc::timeout, "timeout"},
      {Errc::device, "device"},
      {Errc::unavailable, "unavailable"},
      {Errc::not_registered, "not_registered"},
      {Errc::conflict, "conflict"},
      {Errc::integrity, "integrity"},
      {Errc::internal, "internal"},
      {Errc::standby, "standby"},
  }};
}

inline std::string_view to_string(Errc value) { return enum_name(value); }
inline std::optional<Errc> errc_from_string(std::string_view name) { return enum_from_name<Errc>(name); }

struct Error {
  Errc code;
  std::string message;  // says what was wrong and what to do about it

  // "code: message", as shown to users.
  std::string describe() const;
};

template <class T>
using Result = tl::expected<T, Error>;

using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> fail(Errc code, std::string message) {
  return tl::unexpected<Error>(Error{code, std::move(message)});
}

[[noreturn]] void assertion_failed(const char* expr, const char* file, int line, const char* why);

}  // namespace kiln

// Always on, in every build type: an assertion marks what only a bug can cause.
#define KILN_ASSERT(expr, why) \
  ((expr) ? static_cast<void>(0) : ::kiln::assertion_failed(#expr, __FILE__, __LINE__, why))
