// A sample of every protocol message, built from its visit(): every field within its bounds and,
// as far as its spec allows, different from its default and from the other fields (so a field
// the codec drops, swaps or misreads changes the message), every array with two elements, so a
// test can reach each field of each message without naming them. Used for the codec's round
// trip and to check that the decoders refuse bad strings wherever they are.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/protocol/codec.h"

namespace kiln::testing {

// Fills a record; the string field numbered `marked` (in visit order, depth first), if any, gets
// kMarker padded to its minimum length, and its path is recorded.
class SampleFiller {
 public:
  static constexpr std::string_view kMarker = "\x01\x02\x03";

  explicit SampleFiller(std::optional<std::size_t> marked) : marked_(marked) {}

  std::size_t strings_seen() const { return *seen_; }
  const std::string& marked_path() const { return *marked_path_; }

  template <class T, class... Spec>
  void field(std::string_view name, T& value, Spec... spec) {
    fill(path_.empty() ? std::string(name) : path_ + "." + std::string(name), value, spec...);
  }
  template <class T, class... Spec>
  void field(std::string_view name, T& value, protocol::Optional, Spec... spec) {
    field(name, value, spec...);
  }

 private:
  SampleFiller(const SampleFiller& outer, std::string path)
      : marked_(outer.marked_),
        path_(std::move(path)),
        seen_(outer.seen_),
        next_(outer.next_),
        marked_path_(outer.marked_path_) {}

  void fill(const std::string& path, std::string& value, protocol::Str spec) {
    const bool mark = marked_ == *seen_ && spec.max_len >= kMarker.size();
    ++*seen_;
    value = mark ? std::string(kMarker) : "v" + std::to_string((*next_)++);
    if (value.size() > spec.max_len) value.resize(spec.max_len);
    if (value.size() < spec.min_len) value.append(spec.min_len - value.size(), 'x');
    if (mark) *marked_path_ = path;
  }
  // Binary fields are not text: bytes no UTF-8 check would pass.
  void fill(const std::string&, std::string& value, protocol::Bytes spec) {
    value = std::string("\xff\x00\xfe", std::min<std::size_t>(3, spec.max_len));
  }
  void fill(const std::string&, bool& value) { value = !value; }
  template <class I>
    requires std::is_integral_v<I>
  void fill(const std::string&, I& value, protocol::Range spec) {
    const std::uint64_t span = static_cast<std::uint64_t>(spec.max) - static_cast<std::uint64_t>(spec.min);
    value = static_cast<I>(spec.min + static_cast<std::int64_t>(std::min((*next_)++, span)));
  }
  template <class E>
    requires std::is_enum_v<E>
  void fill(const std::string&, E& value) {
    constexpr auto names = enum_names(E{});
    value = names[(*next_)++ % names.size()].first;
  }
  template <protocol::Record T>
  void fill(const std::string& path, T& value) {
    SampleFiller inner(*this, path);
    value.visit(inner);
  }
  template <class T, class... Elem>
  void fill(const std::string& path, std::vector<T>& values, protocol::Count count, Elem... elem) {
    values.resize(std::clamp<std::size_t>(2, count.min, count.max));
    for (std::size_t i = 0; i < values.size(); ++i) fill(path + "[" + std::to_string(i) + "]", values[i], elem...);
  }

  std::optional<std::size_t> marked_;
  std::string path_;
  std::shared_ptr<std::size_t> seen_ = std::make_shared<std::size_t>(0);
  std::shared_ptr<std::uint64_t> next_ = std::make_shared<std::uint64_t>(1);
  std::shared_ptr<std::string> marked_path_ = std::make_shared<std::string>();
};

struct SampleMessage {
  std::string type;
  std::string field;  // the marked string field's path, empty for an unmarked sample
  protocol::Frames frames;
};

template <class T>
std::size_t string_field_count() {
  T value;
  SampleFiller counter(std::nullopt);
  value.visit(counter);
  return counter.strings_seen();
}

template <class T>
SampleMessage sample_message(std::optional<std::size_t> marked) {
  T value;
  SampleFiller filler(marked);
  value.visit(filler);
  auto frames = protocol::encode(protocol::make_envelope(protocol::Body(value), 1));
  KILN_ASSERT(frames.has_value(), "a sample message must encode");
  return SampleMessage{std::string(T::kType), filler.marked_path(), std::move(*frames)};
}

// Every message type once for each of its string fields, with that field marked; `visit` gets
// each.
template <class Visit, std::size_t... I>
void for_each_sample_impl(Visit&& visit, std::index_sequence<I...>) {
  auto one = [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t k = 0; k < string_field_count<T>(); ++k) visit(sample_message<T>(k));
  };
  (one(std::type_identity<std::variant_alternative_t<I, protocol::Body>>{}), ...);
}

template <class Visit>
void for_each_sample(Visit&& visit) {
  for_each_sample_impl(visit, std::make_index_sequence<std::variant_size_v<protocol::Body>>{});
}

// The body frame with the marker's first byte replaced by `byte`: an ill-formed string in
// exactly the marked field, the msgpack structure untouched.
inline std::string with_marker_byte(const std::string& body, char byte) {
  std::string out = body;
  const auto at = out.find(SampleFiller::kMarker);
  KILN_ASSERT(at != std::string::npos, "the sample must hold the marker");
  out[at] = byte;
  return out;
}

}  // namespace kiln::testing
