#include "common/protocol/codec.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <type_traits>

#include <fmt/format.h>
#include <msgpack.hpp>

#include "common/text/utf8.h"

namespace kiln::protocol {
namespace {

std::string join_path(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

// ---- encoding --------------------------------------------------------------------------

using Packer = msgpack::packer<msgpack::sbuffer>;

struct FieldCounter {
  std::uint32_t count = 0;
  template <class... A>
  void field(A&&...) {
    ++count;
  }
};

template <Record T>
std::uint32_t field_count(const T& record) {
  FieldCounter counter;
  const_cast<T&>(record).visit(counter);
  return counter.count;
}

class Encoder {
 public:
  Encoder(Packer& packer, std::string path) : packer_(packer), path_(std::move(path)) {}

  std::optional<std::string> error;

  template <class T, class... Spec>
  void field(std::string_view name, const T& value, Spec... spec) {
    packer_.pack(std::string(name));
    write(join_path(path_, name), value, spec...);
  }
  template <class T, class... Spec>
  void field(std::string_view name, const T& value, Optional, Spec... spec) {
    field(name, value, spec...);
  }

  template <Record T>
  void write_record(const std::string& path, const T& record) {
    packer_.pack_map(field_count(record));
    Encoder inner(packer_, path);
    const_cast<T&>(record).visit(inner);
    if (inner.error && !error) error = inner.error;
  }

 private:
  void note(const std::string& path, std::optional<std::string> problem) {
    if (problem && !error) error = path + " " + *problem;
  }

  void write(const std::string& path, const std::string& value, Str spec) {
    note(path, check_str(value, spec));
    packer_.pack(value);
  }
  void write(const std::string& path, const std::string& value, Bytes spec) {
    note(path, check_bytes(value, spec));
    packer_.pack_bin(static_cast<std::uint32_t>(value.size()));
    packer_.pack_bin_body(value.data(), static_cast<std::uint32_t>(value.size()));
  }
  void write(const std::string&, bool value) { packer_.pack(value); }
  template <class I>
    requires std::is_integral_v<I>
  void write(const std::string& path, I value, Range spec) {
    note(path, check_int(static_cast<std::int64_t>(value), spec));
    packer_.pack(value);
  }
  template <class E>
    requires std::is_enum_v<E>
  void write(const std::string&, E value) {
    packer_.pack(std::string(enum_name(value)));
  }
  template <Record T>
  void write(const std::string& path, const T& value) {
    write_record(path, value);
  }
  template <class T, class... Elem>
  void write(const std::string& path, const std::vector<T>& values, Count count, Elem... elem) {
    note(path, check_count(values.size(), count));
    packer_.pack_array(static_cast<std::uint32_t>(values.size()));
    for (std::size_t i = 0; i < values.size(); ++i) {
      write(fmt::format("{}[{}]", path, i), values[i], elem...);
    }
  }

  Packer& packer_;
  std::string path_;
};

// ---- decoding --------------------------------------------------------------------------

std::string_view kind_of(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "boolean";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER: return "integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "string";
    case msgpack::type::BIN: return "binary";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "extension";
  }
  return "unknown";
}

class Decoder {
 public:
  Decoder(const msgpack::object& map, std::string path) : path_(std::move(path)) {
    if (map.type != msgpack::type::MAP) {
      error = fmt::format("{} must be a map (got {})", path_.empty() ? "body" : path_, kind_of(map));
      return;
    }
    for (std::uint32_t i = 0; i < map.via.map.size; ++i) {
      const auto& kv = map.via.map.ptr[i];
      if (kv.key.type != msgpack::type::STR) {
        error = fmt::format("{} has a key of type {}; keys must be strings",
                            path_.empty() ? "body" : path_, kind_of(kv.key));
        return;
      }
      std::string key(kv.key.via.str.ptr, kv.key.via.str.size);
      if (!fields_.emplace(key, &kv.val).second) {
        error = fmt::format("{} repeats the key '{}'", path_.empty() ? "body" : path_, text::printable(key));
        return;
      }
    }
  }

  std::optional<std::string> error;

  template <class T, class... Spec>
  void field(std::string_view name, T& value, Spec... spec) {
    if (error) return;
    const std::string path = join_path(path_, name);
    auto it = fields_.find(std::string(name));
    if (it == fields_.end()) {
      error = fmt::format("{} is required but missing", path);
      return;
    }
    read(path, *it->second, value, spec...);
  }
  // Absent, it keeps its default.
  template <class T, class... Spec>
  void field(std::string_view name, T& value, Optional, Spec... spec) {
    if (error || fields_.find(std::string(name)) == fields_.end()) return;
    field(name, value, spec...);
  }

  template <Record T>
  void read_record(const std::string& path, const msgpack::object& o, T& value) {
    Decoder inner(o, path);
    if (!inner.error) value.visit(inner);
    if (inner.error) error = inner.error;
  }

 private:
  void wrong_type(const std::string& path, std::string_view want, const msgpack::object& o) {
    error = fmt::format("{} must be {} (got {})", path, want, kind_of(o));
  }
  void note(const std::string& path, std::optional<std::string> problem) {
    if (problem && !error) error = path + " " + *problem;
  }

  void read(const std::string& path, const msgpack::object& o, std::string& value, Str spec) {
    if (o.type != msgpack::type::STR) return wrong_type(path, "a string", o);
    value.assign(o.via.str.ptr, o.via.str.size);
    note(path, check_str(value, spec));
  }
  void read(const std::string& path, const msgpack::object& o, std::string& value, Bytes spec) {
    if (o.type != msgpack::type::BIN) return wrong_type(path, "binary", o);
    value.assign(o.via.bin.ptr, o.via.bin.size);
    note(path, check_bytes(value, spec));
  }
  void read(const std::string& path, const msgpack::object& o, bool& value) {
    if (o.type != msgpack::type::BOOLEAN) return wrong_type(path, "a boolean", o);
    value = o.via.boolean;
  }
  template <class I>
    requires std::is_integral_v<I>
  void read(const std::string& path, const msgpack::object& o, I& value, Range spec) {
    std::int64_t v = 0;
    if (o.type == msgpack::type::POSITIVE_INTEGER) {
      if (o.via.u64 > static_cast<std::uint64_t>(INT64_MAX)) {
        error = fmt::format("{} must be between {} and {} (got {})", path, spec.min, spec.max, o.via.u64);
        return;
      }
      v = static_cast<std::int64_t>(o.via.u64);
    } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      v = o.via.i64;
    } else {
      return wrong_type(path, "an integer", o);
    }
    note(path, check_int(v, spec));
    if (error) return;
    KILN_ASSERT(v >= static_cast<std::int64_t>(std::numeric_limits<I>::min()) &&
                    (v < 0 || static_cast<std::uint64_t>(v) <= std::numeric_limits<I>::max()),
                "a field's Range must fit its C++ type");
    value = static_cast<I>(v);
  }
  template <class E>
    requires std::is_enum_v<E>
  void read(const std::string& path, const msgpack::object& o, E& value) {
    if (o.type != msgpack::type::STR) return wrong_type(path, "a string", o);
    std::string_view name(o.via.str.ptr, o.via.str.size);
    if (auto e = enum_from_name<E>(name)) {
      value = *e;
      return;
    }
    std::string allowed;
    for (const auto& [v, n] : enum_names(E{})) {
      if (!allowed.empty()) allowed += ", ";
      allowed += n;
    }
    error = fmt::format("{} must be one of {} (got '{}')", path, allowed, text::printable(name));
  }
  template <Record T>
  void read(const std::string& path, const msgpack::object& o, T& value) {
    read_record(path, o, value);
  }
  template <class T, class... Elem>
  void read(const std::string& path, const msgpack::object& o, std::vector<T>& values, Count count,
            Elem... elem) {
    if (o.type != msgpack::type::ARRAY) return wrong_type(path, "an array", o);
    note(path, check_count(o.via.array.size, count));
    if (error) return;
    values.clear();
    values.resize(o.via.array.size);
    for (std::uint32_t i = 0; i < o.via.array.size && !error; ++i) {
      read(fmt::format("{}[{}]", path, i), o.via.array.ptr[i], values[i], elem...);
    }
  }

  std::string path_;
  std::map<std::string, const msgpack::object*, std::less<>> fields_;
};

msgpack::unpack_limit limits_for(std::size_t frame_bytes) {
  // Bounds on what a hostile frame can make the unpacker allocate.
  return msgpack::unpack_limit(/*array=*/4096, /*map=*/64, /*str=*/frame_bytes, /*bin=*/frame_bytes,
                               /*ext=*/0, /*depth=*/8);
}

Result<msgpack::object_handle> unpack_frame(std::string_view frame, std::string_view what) {
  if (frame.empty()) return fail(Errc::bad_message, fmt::format("the {} frame is empty", what));
  std::size_t offset = 0;
  try {
    msgpack::object_handle handle =
        msgpack::unpack(frame.data(), frame.size(), offset, nullptr, nullptr, limits_for(frame.size()));
    if (offset != frame.size()) {
      return fail(Errc::bad_message,
                  fmt::format("the {} frame has {} trailing bytes after its msgpack value", what,
                              frame.size() - offset));
    }
    return handle;
  } catch (const msgpack::insufficient_bytes&) {
    return fail(Errc::bad_message, fmt::format("the {} frame is truncated msgpack", what));
  } catch (const std::exception& e) {
    return fail(Errc::bad_message, fmt::format("the {} frame is not valid msgpack: {}", what, e.what()));
  }
}

struct HeaderRecord {
  Header& h;
  template <class V>
  void visit(V& v) {
    v.field("v", h.v, Range{0, UINT32_MAX});
    v.field("type", h.type, Str{1, 64});
    v.field("id", h.id, Range{1, INT64_MAX});
    v.field("corr", h.corr, Range{0, INT64_MAX});
  }
};

template <class T>
Result<Body> decode_body_as(const msgpack::object& o) {
  T value;
  Decoder decoder(o, "");
  if (!decoder.error) value.visit(decoder);
  if (decoder.error) {
    return fail(Errc::bad_message, fmt::format("{} message: {}", T::kType, *decoder.error));
  }
  return Body(std::move(value));
}

using BodyDecoder = Result<Body> (*)(const msgpack::object&);

template <std::size_t... I>
std::map<std::string_view, BodyDecoder> make_decoders(std::index_sequence<I...>) {
  return {{std::variant_alternative_t<I, Body>::kType,
           &decode_body_as<std::variant_alternative_t<I, Body>>}...};
}

const std::map<std::string_view, BodyDecoder>& decoders() {
  static const auto table = make_decoders(std::make_index_sequence<std::variant_size_v<Body>>{});
  return table;
}

}  // namespace

std::string_view type_name(const Body& body) {
  return std::visit([](const auto& b) { return std::remove_cvref_t<decltype(b)>::kType; }, body);
}

bool is_supported_version(std::uint32_t v) {
  return std::find(kSupportedVersions.begin(), kSupportedVersions.end(), v) != kSupportedVersions.end();
}

Envelope make_envelope(Body body, std::uint64_t id, std::uint64_t corr) {
  Envelope e{Header{kProtocolVersion, std::string(type_name(body)), id, corr}, std::move(body)};
  return e;
}

Result<Frames> encode(const Envelope& envelope, const CodecLimits& limits) {
  KILN_ASSERT(envelope.header.type == type_name(envelope.body), "header type must match the body");
  Frames frames;
  {
    msgpack::sbuffer buffer;
    Packer packer(buffer);
    Header header = envelope.header;
    HeaderRecord record{header};
    Encoder encoder(packer, "header");
    encoder.write_record("header", record);
    if (encoder.error) return fail(Errc::invalid_argument, "cannot encode header: " + *encoder.error);
    frames.header.assign(buffer.data(), buffer.size());
  }
  {
    msgpack::sbuffer buffer;
    Packer packer(buffer);
    Encoder encoder(packer, "");
    std::visit([&](const auto& body) { encoder.write_record("", body); }, envelope.body);
    if (encoder.error) {
      return fail(Errc::invalid_argument,
                  fmt::format("cannot encode {} message: {}", envelope.header.type, *encoder.error));
    }
    frames.body.assign(buffer.data(), buffer.size());
  }
  if (frames.header.size() + frames.body.size() > limits.max_message_bytes) {
    return fail(Errc::too_large,
                fmt::format("{} message is {} bytes, over the limit of {} bytes", envelope.header.type,
                            frames.header.size() + frames.body.size(), limits.max_message_bytes));
  }
  return frames;
}

Result<Header> decode_header(std::string_view header_frame, const CodecLimits& limits) {
  if (header_frame.size() > limits.max_header_bytes) {
    return fail(Errc::too_large, fmt::format("the header frame is {} bytes, over the limit of {} bytes",
                                             header_frame.size(), limits.max_header_bytes));
  }
  auto handle = unpack_frame(header_frame, "header");
  if (!handle) return tl::unexpected(handle.error());
  Header header;
  HeaderRecord record{header};
  Decoder decoder(handle->get(), "header");
  if (!decoder.error) record.visit(decoder);
  if (decoder.error) return fail(Errc::bad_message, *decoder.error);
  return header;
}

Result<Envelope> decode(std::string_view header_frame, std::string_view body_frame,
                        const CodecLimits& limits) {
  if (header_frame.size() + body_frame.size() > limits.max_message_bytes) {
    return fail(Errc::too_large, fmt::format("message is {} bytes, over the limit of {} bytes",
                                             header_frame.size() + body_frame.size(),
                                             limits.max_message_bytes));
  }
  auto header = decode_header(header_frame, limits);
  if (!header) return tl::unexpected(header.error());
  if (!is_supported_version(header->v)) {
    return fail(Errc::unsupported_version,
                fmt::format("protocol version {} is not supported; this peer speaks version {}",
                            header->v, kProtocolVersion));
  }
  auto it = decoders().find(header->type);
  if (it == decoders().end()) {
    return fail(Errc::bad_message, fmt::format("unknown message type '{}'", text::printable(header->type)));
  }
  auto handle = unpack_frame(body_frame, "body");
  if (!handle) return tl::unexpected(handle.error());
  auto body = it->second(handle->get());
  if (!body) return tl::unexpected(body.error());
  return Envelope{std::move(*header), std::move(*body)};
}

}  // namespace kiln::protocol
