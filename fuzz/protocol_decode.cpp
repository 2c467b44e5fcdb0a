// Protocol v1 decoder: the two frames a peer sends. Input layout: a 2-byte little-endian
// header length, the header frame, then the body frame (the rest).
#include "common/protocol/codec.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(protocol_decode) {
  using namespace kiln::protocol;
  const std::string_view input = kiln::fuzz::as_text(data, size);
  if (input.size() < 2) return 0;
  const std::size_t header_length = std::min<std::size_t>(
      static_cast<std::uint8_t>(input[0]) | (static_cast<std::size_t>(static_cast<std::uint8_t>(input[1])) << 8),
      input.size() - 2);
  const std::string_view header = input.substr(2, header_length);
  const std::string_view body = input.substr(2 + header_length);

  // decode() reads the header with decode_header() first, so this covers both.
  auto envelope = decode(header, body);
  if (!envelope) return 0;
  // Whatever the decoder accepts is within the bounds the encoder enforces, and reads back.
  auto frames = encode(*envelope);
  if (!frames) kiln::fuzz::violated("a decoded message does not encode again");
  auto again = decode(frames->header, frames->body);
  if (!again) kiln::fuzz::violated("a re-encoded message does not decode");
  if (again->header.type != envelope->header.type) kiln::fuzz::violated("re-encoding changed the message type");
  return 0;
}
