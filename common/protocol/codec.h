// Protocol v1 framing: every message is two ZeroMQ frames, a msgpack header map
// {v, type, id, corr} and a msgpack body map. Decoding validates everything (types,
// ranges, required fields, sizes) and never throws; encoding refuses values outside the
// same bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/protocol/messages.h"

namespace kiln::protocol {

struct Header {
  std::uint32_t v = kProtocolVersion;
  std::string type;
  std::uint64_t id = 0;    // unique per sender and connection, never 0
  std::uint64_t corr = 0;  // id of the message this replies to, 0 when not a reply
};

struct Envelope {
  Header header;
  Body body;
};

struct CodecLimits {
  std::size_t max_header_bytes = 512;
  std::size_t max_message_bytes = 1 << 20;  // header and body together
};

struct Frames {
  std::string header;
  std::string body;
};

// Builds an envelope with the body's type name filled in.
Envelope make_envelope(Body body, std::uint64_t id, std::uint64_t corr = 0);

Result<Frames> encode(const Envelope& envelope, const CodecLimits& limits = {});

// Decodes only the header: used to answer a message whose body is bad with an error that
// still carries the right corr, and to refuse unknown versions before reading the body.
Result<Header> decode_header(std::string_view header_frame, const CodecLimits& limits = {});

Result<Envelope> decode(std::string_view header_frame, std::string_view body_frame,
                        const CodecLimits& limits = {});

bool is_supported_version(std::uint32_t v);

}  // namespace kiln::protocol
