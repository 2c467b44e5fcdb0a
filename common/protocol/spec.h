// Field specifications shared by every protocol message. A message describes its fields
// once, in visit(); the encoder and the validating decoder are both driven by it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/enum_names.h"

namespace kiln::protocol {

// String length bounds in bytes.
struct Str {
  std::size_t min_len = 0;
  std::size_t max_len = 256;
};

// Length bounds of a binary field (msgpack bin): artifact bytes, which are not text.
struct Bytes {
  std::size_t max_len = 0;
};

// Inclusive bounds for an integer field.
struct Range {
  std::int64_t min = 0;
  std::int64_t max = INT64_MAX;
};

// A field added to version 1 after peers and stores without it existed: a message or a stored
// document without it reads as the field's default (docs/protocol.md §5.2). Written first among
// a field's specifications.
struct Optional {};

// Element count bounds for an array field.
struct Count {
  std::size_t min = 0;
  std::size_t max = 64;
};

// Each returns a description of the problem ("must be 1 to 64 bytes long (got 80)"), or
// nothing when the value is within bounds.
std::optional<std::string> check_str(const std::string& value, Str spec);
std::optional<std::string> check_bytes(const std::string& value, Bytes spec);
std::optional<std::string> check_int(std::int64_t value, Range spec);
std::optional<std::string> check_count(std::size_t count, Count spec);

// A struct with a visit() template: what the encoders and decoders walk.
struct ProbeVisitor {
  template <class... A>
  void field(A&&...) {}
};
template <class T>
concept Record = requires(T& t, ProbeVisitor& p) { t.visit(p); };

// Wire enums name their values through common/enum_names.h, as every enum of kiln does.
using kiln::enum_from_name;
using kiln::enum_name;
using kiln::enum_values;

}  // namespace kiln::protocol
