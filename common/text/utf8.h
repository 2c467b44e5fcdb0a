// UTF-8 validation and repair. Every string kiln puts on the wire, in its store or in JSON is
// valid UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); bytes from
// workloads, files and peers are checked or repaired here before they get that far.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::text {

// The offset of the first byte that does not begin a valid sequence, or nothing when all of
// `bytes` is valid UTF-8.
std::optional<std::size_t> first_invalid_utf8(std::string_view bytes);

inline bool is_valid_utf8(std::string_view bytes) { return !first_invalid_utf8(bytes); }

// `bytes` with every ill-formed sequence replaced by U+FFFD, one per maximal invalid subpart
// (the Unicode "substitution of maximal subparts" practice, as browsers and Python do).
std::string to_valid_utf8(std::string_view bytes);

// The end of `bytes`, repaired as above and cut on a character boundary, at most `max_bytes`
// long: what a workload printed last, safe to send and to store.
std::string utf8_tail(std::string_view bytes, std::size_t max_bytes);

// The start of `bytes`, repaired and cut on a character boundary, at most `max_bytes` long.
std::string utf8_head(std::string_view bytes, std::size_t max_bytes);

// `bytes` quoted for an error message: printable ASCII and valid UTF-8 as they are, every other
// byte as \xNN, at most `max_bytes` of the input shown ("..." after a cut).
std::string printable(std::string_view bytes, std::size_t max_bytes = 64);

}  // namespace kiln::text
