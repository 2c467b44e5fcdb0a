#include "report/report_fields.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace kiln::report {

const Json& member(const Json& object, std::string_view key) {
  static const Json absent;
  if (!object.is_object()) return absent;
  const auto it = object.find(std::string(key));
  return it == object.end() ? absent : *it;
}

const Json& items(const Json& object, std::string_view key) {
  static const Json none = Json::array();
  const Json& value = member(object, key);
  return value.is_array() ? value : none;
}

std::string text_of(const Json& object, std::string_view key) {
  const Json& value = member(object, key);
  return value.is_string() ? value.get<std::string>() : std::string();
}

bool flag_of(const Json& object, std::string_view key) {
  const Json& value = member(object, key);
  return value.is_boolean() && value.get<bool>();
}

std::int64_t integer_of(const Json& object, std::string_view key) {
  const Json& value = member(object, key);
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_number_unsigned()) return static_cast<std::int64_t>(std::min<std::uint64_t>(value.get<std::uint64_t>(), INT64_MAX));
  return 0;
}

std::optional<double> finite(const Json& value) {
  if (!value.is_number()) return std::nullopt;
  const double number = value.get<double>();
  return std::isfinite(number) ? std::optional<double>(number) : std::nullopt;
}

std::optional<double> number_of(const Json& object, std::string_view key) { return finite(member(object, key)); }

std::vector<double> finite_numbers(const Json& array) {
  std::vector<double> out;
  if (!array.is_array()) return out;
  for (const Json& value : array) {
    if (auto number = finite(value)) out.push_back(*number);
  }
  return out;
}

std::vector<std::string> texts(const Json& array) {
  std::vector<std::string> out;
  if (!array.is_array()) return out;
  for (const Json& value : array) {
    if (value.is_string()) out.push_back(value.get<std::string>());
  }
  return out;
}

double median(std::vector<double> values) {
  KILN_ASSERT(!values.empty(), "the median of no values");
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

}  // namespace kiln::report
