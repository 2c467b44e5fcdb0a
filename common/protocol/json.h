// JSON views of protocol records, driven by the same visit() as the wire codec: the CLI's
// --json output and the coordinator's stored documents use the field names of docs/protocol.md.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/protocol/spec.h"

namespace kiln::protocol {

namespace json_detail {

class Writer {
 public:
  explicit Writer(nlohmann::json& out) : out_(out) {}

  template <class T, class... Spec>
  void field(std::string_view name, const T& value, Spec...) {
    out_[std::string(name)] = convert(value);
  }

  // Binary fields (artifact bytes) are not text: lowercase hex.
  void field(std::string_view name, const std::string& value, Bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(value.size() * 2);
    for (unsigned char c : value) {
      hex += kDigits[c >> 4];
      hex += kDigits[c & 0xF];
    }
    out_[std::string(name)] = std::move(hex);
  }

  template <class T>
  static nlohmann::json convert(const T& value) {
    if constexpr (std::is_enum_v<T>) {
      return std::string(enum_name(value));
    } else if constexpr (Record<T>) {
      nlohmann::json obj = nlohmann::json::object();
      Writer w(obj);
      const_cast<T&>(value).visit(w);
      return obj;
    } else if constexpr (requires { value.begin(); typename T::value_type; } &&
                         !std::is_same_v<T, std::string>) {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& v : value) arr.push_back(convert(v));
      return arr;
    } else {
      return value;
    }
  }

 private:
  nlohmann::json& out_;
};

class Reader {
 public:
  Reader(const nlohmann::json& in, std::string path) : in_(in), path_(std::move(path)) {
    if (!in_.is_object()) error = (path_.empty() ? std::string("document") : path_) + " must be an object";
  }

  std::optional<std::string> error;

  template <class T, class... Spec>
  void field(std::string_view name, T& value, Spec... spec) {
    if (error) return;
    const std::string path = path_.empty() ? std::string(name) : path_ + "." + std::string(name);
    auto it = in_.find(std::string(name));
    if (it == in_.end()) {
      error = path + " is required but missing";
      return;
    }
    read(path, *it, value, spec...);
  }
  // Absent, it keeps its default.
  template <class T, class... Spec>
  void field(std::string_view name, T& value, Optional, Spec... spec) {
    if (error || !in_.contains(std::string(name))) return;
    field(name, value, spec...);
  }

 private:
  void read(const std::string& path, const nlohmann::json& j, std::string& value, Str spec) {
    if (!j.is_string()) return fail_type(path, "a string");
    value = j.get<std::string>();
    note(path, check_str(value, spec));
  }
  void read(const std::string& path, const nlohmann::json& j, std::string& value, Bytes spec) {
    if (!j.is_string()) return fail_type(path, "a string of hex digits");
    const auto& hex = j.get_ref<const std::string&>();
    const auto digit = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    value.clear();
    for (std::size_t i = 0; i < hex.size(); i += 2) {
      const int high = digit(hex[i]);
      const int low = i + 1 < hex.size() ? digit(hex[i + 1]) : -1;
      if (high < 0 || low < 0) return fail_type(path, "a string of pairs of lowercase hex digits");
      value += static_cast<char>(high * 16 + low);
    }
    note(path, check_bytes(value, spec));
  }
  void read(const std::string& path, const nlohmann::json& j, bool& value) {
    if (!j.is_boolean()) return fail_type(path, "a boolean");
    value = j.get<bool>();
  }
  template <class I>
    requires std::is_integral_v<I>
  void read(const std::string& path, const nlohmann::json& j, I& value, Range spec) {
    if (!j.is_number_integer()) return fail_type(path, "an integer");
    std::int64_t v = j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                         ? INT64_MAX
                         : j.get<std::int64_t>();
    note(path, check_int(v, spec));
    if (!error) value = static_cast<I>(v);
  }
  template <class E>
    requires std::is_enum_v<E>
  void read(const std::string& path, const nlohmann::json& j, E& value) {
    if (!j.is_string()) return fail_type(path, "a string");
    auto e = enum_from_name<E>(j.get<std::string>());
    if (!e) {
      error = fmt::format("{} has an unknown value '{}'", path, j.get<std::string>());
      return;
    }
    value = *e;
  }
  template <Record T>
  void read(const std::string& path, const nlohmann::json& j, T& value) {
    Reader inner(j, path);
    if (!inner.error) value.visit(inner);
    if (inner.error) error = inner.error;
  }
  template <class T, class... Elem>
  void read(const std::string& path, const nlohmann::json& j, std::vector<T>& values, Count count,
            Elem... elem) {
    if (!j.is_array()) return fail_type(path, "an array");
    note(path, check_count(j.size(), count));
    values.assign(j.size(), T{});
    for (std::size_t i = 0; i < j.size() && !error; ++i) {
      read(fmt::format("{}[{}]", path, i), j[i], values[i], elem...);
    }
  }

  void fail_type(const std::string& path, std::string_view want) {
    if (!error) error = fmt::format("{} must be {}", path, want);
  }
  void note(const std::string& path, std::optional<std::string> problem) {
    if (problem && !error) error = path + " " + *problem;
  }

  const nlohmann::json& in_;
  std::string path_;
};

}  // namespace json_detail

template <Record T>
nlohmann::json to_json(const T& record) {
  return json_detail::Writer::convert(record);
}

template <class T>
nlohmann::json to_json(const std::vector<T>& records) {
  return json_detail::Writer::convert(records);
}

template <Record T>
Result<T> from_json(const nlohmann::json& document) {
  T value;
  json_detail::Reader reader(document, "");
  if (!reader.error) value.visit(reader);
  if (reader.error) return fail(Errc::bad_message, *reader.error);
  return value;
}

}  // namespace kiln::protocol
