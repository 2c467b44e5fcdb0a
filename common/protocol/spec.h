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

namespace kiln::protocol {

// String length bounds in bytes.
struct Str {
  std::size_t min_len = 0;
  std::size_t max_len = 256;
};

// Inclusive bounds for an integer field.
struct Range {
  std::int64_t min = 0;
  std::int64_t max = INT64_MAX;
};

// Element count bounds for an array field.
struct Count {
  std::size_t min = 0;
  std::size_t max = 64;
};

// Each returns a description of the problem ("must be 1 to 64 bytes long (got 80)"), or
// nothing when the value is within bounds.
std::optional<std::string> check_str(const std::string& value, Str spec);
std::optional<std::string> check_int(std::int64_t value, Range spec);
std::optional<std::string> check_count(std::size_t count, Count spec);

// A struct with a visit() template: what the encoders and decoders walk.
struct ProbeVisitor {
  template <class... A>
  void field(A&&...) {}
};
template <class T>
concept Record = requires(T& t, ProbeVisitor& p) { t.visit(p); };

// Each enum carried on the wire lists its names in an EnumNames specialization.
template <class E>
struct EnumNames;

template <class E>
constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : EnumNames<E>::values) {
    if (v == value) return name;
  }
  return "?";
}

template <class E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& [v, n] : EnumNames<E>::values) {
    if (n == name) return v;
  }
  return std::nullopt;
}

}  // namespace kiln::protocol
