// UTF-8 validation and repair, and the decoders' refusal of ill-formed strings in every field.
#include <doctest/doctest.h>

#include "common/protocol/codec.h"
#include "common/protocol/repair.h"
#include "common/text/utf8.h"
#include "tests/support/message_samples.h"

using namespace kiln;
using kiln::text::first_invalid_utf8;
using kiln::text::is_valid_utf8;
using kiln::text::to_valid_utf8;

TEST_CASE("UTF-8 validation follows RFC 3629") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii"));
  CHECK(is_valid_utf8("\xC3\xA9"));              // é
  CHECK(is_valid_utf8("\xE2\x82\xAC"));          // €
  CHECK(is_valid_utf8("\xF0\x9F\x94\xA5"));      // 🔥
  CHECK(is_valid_utf8("\xF4\x8F\xBF\xBF"));      // U+10FFFF
  CHECK(first_invalid_utf8("ok\xFF") == 2u);     // never a lead byte
  CHECK(first_invalid_utf8("\x80") == 0u);       // a lone continuation
  CHECK(first_invalid_utf8("ab\xC3") == 2u);     // cut short
  CHECK(first_invalid_utf8("\xC0\xAF") == 0u);   // overlong '/'
  CHECK(first_invalid_utf8("\xE0\x80\xAF") == 0u);  // overlong
  CHECK(first_invalid_utf8("\xED\xA0\x80") == 0u);  // a surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0u);  // above U+10FFFF
  CHECK(first_invalid_utf8("\xF5\x80\x80\x80") == 0u);
}

TEST_CASE("repair replaces each maximal invalid subpart with one U+FFFD") {
  const std::string r = "\xEF\xBF\xBD";
  CHECK(to_valid_utf8("a\xFF" "b") == "a" + r + "b");
  CHECK(to_valid_utf8("\xE2\x82") == r);                // one truncated sequence, one mark
  CHECK(to_valid_utf8("\xE2\x82" "x") == r + "x");
  CHECK(to_valid_utf8("\xC0\xAF") == r + r);            // C0 never starts a sequence
  CHECK(to_valid_utf8("\xED\xA0\x80") == r + r + r);    // surrogate: each byte alone
  CHECK(to_valid_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(is_valid_utf8(to_valid_utf8(std::string("\x00\xFF\xFE\x80\xC3", 5))));
}

TEST_CASE("a tail is cut on a character boundary and is valid whatever the bytes were") {
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "\xC3\xA9\n";  // 3 bytes a line, 2 of them one character
  for (std::size_t limit : {1u, 2u, 3u, 4u, 100u, 101u, 2999u, 3000u, 5000u}) {
    const std::string tail = text::utf8_tail(many, limit);
    CHECK(tail.size() <= limit);
    CHECK(is_valid_utf8(tail));
    CHECK(many.ends_with(tail));
    CHECK(tail.size() + 2 >= std::min<std::size_t>(limit, many.size()));
    const std::string head = text::utf8_head(many, limit);
    CHECK(head.size() <= limit);
    CHECK(is_valid_utf8(head));
    CHECK(many.starts_with(head));
  }
  const std::string binary("\xFF\xFE\x00\x01\x80\x80", 6);
  CHECK(is_valid_utf8(text::utf8_tail(binary, 4)));
  CHECK(text::utf8_tail(binary, 4).size() <= 4);
}

TEST_CASE("printable shows invalid and control bytes as escapes") {
  CHECK(text::printable("ok\xFF\n") == "ok\\xff\\x0a");
  CHECK(text::printable("caf\xC3\xA9") == "caf\xC3\xA9");
  CHECK(text::printable(std::string(100, 'x'), 10) == std::string(10, 'x') + "...");
}

TEST_CASE("every string field of every message: an ill-formed string is refused by the decoder, naming the field") {
  std::size_t checked = 0;
  testing::for_each_sample([&](const testing::SampleMessage& sample) {
    REQUIRE(!sample.field.empty());
    for (char bad : {'\xFF', '\xC3', '\xED', '\x80'}) {
      const std::string body = testing::with_marker_byte(sample.frames.body, bad);
      auto back = protocol::decode(sample.frames.header, body);
      REQUIRE_MESSAGE(!back.has_value(), sample.type, ".", sample.field);
      CHECK(back.error().code == Errc::bad_message);
      CHECK_MESSAGE(back.error().message.find(sample.field) != std::string::npos, back.error().message);
      CHECK_MESSAGE(back.error().message.find("UTF-8") != std::string::npos, back.error().message);
      CHECK(is_valid_utf8(back.error().message));
    }
    ++checked;
  });
  CHECK(checked >= 100);  // nested records and arrays included
}

TEST_CASE("the encoder refuses an ill-formed string; repair_utf8 makes any message sendable") {
  protocol::JobFinished fin;
  fin.job_id = 7;
  fin.output_tail = std::string("progress 99%\n\xFF\xFE binary", 22);
  fin.detail = std::string(protocol::kMessageText.max_len - 1, 'x') + "\xC3\xA9";  // one byte over, mid-character
  auto refused = protocol::encode(protocol::make_envelope(fin, 1));
  REQUIRE(!refused.has_value());
  CHECK(refused.error().message.find("UTF-8") != std::string::npos);

  protocol::Body body = fin;
  protocol::repair_utf8(body);
  auto frames = protocol::encode(protocol::make_envelope(body, 1));
  REQUIRE_MESSAGE(frames.has_value(), frames.error().message);
  auto back = protocol::decode(frames->header, frames->body);
  REQUIRE(back.has_value());
  const auto& repaired = std::get<protocol::JobFinished>(back->body);
  CHECK(repaired.output_tail.starts_with("progress 99%\n"));
  CHECK(repaired.output_tail.find("\xEF\xBF\xBD") != std::string::npos);
  CHECK(repaired.detail.size() <= protocol::kMessageText.max_len);
}
