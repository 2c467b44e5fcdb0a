// One mechanism for an enum's names. Beside the enum, a constexpr `enum_names(E)` (found by
// argument-dependent lookup) returns every value with its name; enum_name, enum_from_name and
// enum_values read that table, so no name is written twice and no switch can miss a value.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace kiln {

template <class E, std::size_t N>
using EnumTable = std::array<std::pair<E, std::string_view>, N>;

template <class E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) { enum_names(e); };

template <NamedEnum E>
constexpr std::string_view enum_name(E value) {
  for (const auto& [v, name] : enum_names(value)) {
    if (v == value) return name;
  }
  return "?";
}

template <NamedEnum E>
constexpr std::optional<E> enum_from_name(std::string_view name) {
  for (const auto& [v, n] : enum_names(E{})) {
    if (n == name) return v;
  }
  return std::nullopt;
}

// Every value, in the table's order.
template <NamedEnum E>
constexpr auto enum_values() {
  constexpr auto table = enum_names(E{});
  std::array<E, table.size()> values{};
  for (std::size_t i = 0; i < table.size(); ++i) values[i] = table[i].first;
  return values;
}

}  // namespace kiln
