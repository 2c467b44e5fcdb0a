// Makes every string of a message valid UTF-8 within its field's length bound, so that what a
// workload or a file put into a message can always be sent: the decoder of every peer refuses
// a message with an ill-formed string (docs/protocol.md §2).
#pragma once

#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/protocol/spec.h"
#include "common/text/utf8.h"

namespace kiln::protocol {

class Utf8Repairer {
 public:
  template <class T, class... Spec>
  void field(std::string_view, T& value, Spec... spec) {
    repair(value, spec...);
  }
  template <class T, class... Spec>
  void field(std::string_view, T& value, Optional, Spec... spec) {
    repair(value, spec...);
  }

 private:
  static void repair(std::string& value, Str spec) {
    if (value.size() > spec.max_len || !text::is_valid_utf8(value)) value = text::utf8_head(value, spec.max_len);
  }
  // Binary fields carry bytes, not text.
  static void repair(std::string&, Bytes) {}
  template <class T, class... Spec>
    requires(!std::is_same_v<T, std::string> && !Record<T>)
  static void repair(T&, Spec...) {}
  template <Record T>
  void repair(T& value) {
    value.visit(*this);
  }
  template <class T, class... Elem>
  void repair(std::vector<T>& values, Count, Elem... elem) {
    for (auto& v : values) repair(v, elem...);
  }
};

template <Record T>
void repair_utf8(T& record) {
  Utf8Repairer repairer;
  record.visit(repairer);
}

template <class... Alternatives>
void repair_utf8(std::variant<Alternatives...>& body) {
  std::visit([](auto& record) { repair_utf8(record); }, body);
}

}  // namespace kiln::protocol
