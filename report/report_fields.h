// Reading a run report (kiln.qualification-run/1) without trusting it: a missing field, or one of
// another type, reads as empty, so an old report (from before a field existed) or a damaged one
// still renders and never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::report {

using Json = nlohmann::json;

// The member, or a null value when `object` is not an object or has no such key.
const Json& member(const Json& object, std::string_view key);
// The member's elements, or none when it is not an array.
const Json& items(const Json& object, std::string_view key);
std::string text_of(const Json& object, std::string_view key);
bool flag_of(const Json& object, std::string_view key);
std::int64_t integer_of(const Json& object, std::string_view key);
// A finite number; the report writes non-finite ones as "nan", "inf", "-inf", which read as none.
std::optional<double> finite(const Json& value);
std::optional<double> number_of(const Json& object, std::string_view key);
// The finite numbers of an array, in order.
std::vector<double> finite_numbers(const Json& array);
std::vector<std::string> texts(const Json& array);

double median(std::vector<double> values);  // of a non-empty list

}  // namespace kiln::report
