#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "common/protocol/codec.h"
#include "tests/support/message_samples.h"

using namespace kiln;
using namespace kiln::protocol;

namespace {

Hello sample_hello() {
  Hello h;
  h.node_id = "n01";
  h.hardware_revision = "a";
  h.agent_version = "0.1.0";
  h.driver_version = "sim-1.0";
  h.protocol_versions = {1};
  for (std::uint32_t i = 0; i < 8; ++i) {
    h.chips.push_back(ChipInfo{i, "SIM-A-" + std::to_string(i), "fw-1.0", i / 4, true});
  }
  h.host = HostInfo{"host1", 2, 16, 4};
  h.running_jobs = {7, 9};
  return h;
}

// Packs a header map by hand so tests can build frames the encoder would refuse to make.
std::string pack_header(std::uint32_t v, const std::string& type, std::uint64_t id = 1) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(4);
  pk.pack(std::string("v"));
  pk.pack(v);
  pk.pack(std::string("type"));
  pk.pack(type);
  pk.pack(std::string("id"));
  pk.pack(id);
  pk.pack(std::string("corr"));
  pk.pack(std::uint64_t{0});
  return std::string(buffer.data(), buffer.size());
}

Frames encoded(Body body) {
  auto frames = encode(make_envelope(std::move(body), 42, 7));
  REQUIRE(frames.has_value());
  return *frames;
}

// Encodes a sample of T, decodes it, and encodes what came back: the two encodings are the same
// bytes only if every field survived.
template <class T>
void check_round_trip() {
  INFO("message type ", T::kType);
  T sample;
  kiln::testing::SampleFiller filler(std::nullopt);
  sample.visit(filler);
  auto frames = encode(make_envelope(sample, 42, 7));
  REQUIRE_MESSAGE(frames.has_value(), frames.error().message);
  auto back = decode(frames->header, frames->body);
  REQUIRE_MESSAGE(back.has_value(), back.error().message);
  CHECK(back->header.type == T::kType);
  CHECK(back->header.id == 42);
  CHECK(back->header.corr == 7);
  REQUIRE(std::holds_alternative<T>(back->body));
  auto again = encode(*back);
  REQUIRE_MESSAGE(again.has_value(), again.error().message);
  CHECK(again->body == frames->body);
}

}  // namespace

TEST_CASE("hello and job_finished round-trip through the codec field by field") {
  const Hello hello = sample_hello();
  auto f = encoded(hello);
  auto decoded = decode(f.header, f.body);
  REQUIRE(decoded.has_value());
  CHECK(decoded->header.type == "hello");
  CHECK(decoded->header.id == 42);
  CHECK(decoded->header.corr == 7);
  const auto& h = std::get<Hello>(decoded->body);
  CHECK(h.node_id == "n01");
  CHECK(h.chips.size() == 8);
  CHECK(h.chips[5].serial == "SIM-A-5");
  CHECK(h.chips[5].numa_node == 1);
  CHECK(h.host.cores == 16);
  CHECK(h.running_jobs == std::vector<std::uint64_t>{7, 9});

  JobFinished fin;
  fin.job_id = 3;
  fin.outcome = JobOutcome::timed_out;
  fin.exit_code = -9;
  fin.output_tail = "last words";
  auto f2 = encoded(fin);
  auto d2 = decode(f2.header, f2.body);
  REQUIRE(d2.has_value());
  const auto& fin2 = std::get<JobFinished>(d2->body);
  CHECK(fin2.outcome == JobOutcome::timed_out);
  CHECK(fin2.exit_code == -9);
  CHECK(fin2.output_tail == "last words");
}

TEST_CASE("every message type round-trips with a value in every field") {
  // Walks Body itself: a message added to the variant is covered without editing this test.
  []<std::size_t... I>(std::index_sequence<I...>) {
    (check_round_trip<std::variant_alternative_t<I, Body>>(), ...);
  }(std::make_index_sequence<std::variant_size_v<Body>>{});
}

TEST_CASE("truncated frames are refused with a clear error, at every cut") {
  auto f = encoded(sample_hello());
  for (std::size_t cut = 0; cut < f.body.size(); ++cut) {
    auto r = decode(f.header, std::string_view(f.body).substr(0, cut));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::bad_message);
  }
  for (std::size_t cut = 0; cut < f.header.size(); ++cut) {
    auto r = decode(std::string_view(f.header).substr(0, cut), f.body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::bad_message);
  }
}

TEST_CASE("random garbage never crashes the decoder") {
  std::uint64_t state = 12345;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  auto f = encoded(sample_hello());
  for (int trial = 0; trial < 3000; ++trial) {
    std::string body = f.body;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < flips; ++i) body[next() % body.size()] = static_cast<char>(next());
    auto r = decode(f.header, body);
    if (!r) CHECK(r.error().code == Errc::bad_message);
  }
}

TEST_CASE("an optional field left out reads as its default; sent, it is read and checked like any other") {
  // A quarantine_node from a qualifier built before `cause` existed.
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(3);
  for (const char* kv : {"node_id", "n01", "reason", "wrong outputs", "owner", "lab"}) pk.pack(std::string(kv));
  auto old_sender = decode(pack_header(1, "quarantine_node"), std::string(buffer.data(), buffer.size()));
  REQUIRE(old_sender.has_value());
  CHECK(std::get<QuarantineNode>(old_sender->body).cause == QuarantineCause::other);

  QuarantineNode sent{"n01", "wrong outputs", "lab", QuarantineCause::wrong_results};
  auto round = encode(make_envelope(sent, 2));
  REQUIRE(round.has_value());
  auto read = decode(round->header, round->body);
  REQUIRE(read.has_value());
  CHECK(std::get<QuarantineNode>(read->body).cause == QuarantineCause::wrong_results);

  msgpack::sbuffer bad;
  msgpack::packer<msgpack::sbuffer> bad_pk(bad);
  bad_pk.pack_map(4);
  for (const char* kv : {"node_id", "n01", "reason", "x", "owner", "lab", "cause", "cosmic_rays"}) {
    bad_pk.pack(std::string(kv));
  }
  auto refused = decode(pack_header(1, "quarantine_node"), std::string(bad.data(), bad.size()));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("cause must be one of") != std::string::npos);
}

TEST_CASE("watch_jobs, job_events and node_list from peers older than leases and node revisions read as none and 0") {
  // A watch_jobs from a client built before `leases` and `nodes_revision` existed.
  msgpack::sbuffer watch;
  msgpack::packer<msgpack::sbuffer> pk(watch);
  pk.pack_map(2);
  pk.pack(std::string("jobs"));
  pk.pack_array(1);
  pk.pack_map(3);
  pk.pack(std::string("job_id"));
  pk.pack(std::uint64_t{7});
  pk.pack(std::string("state"));
  pk.pack(std::string("running"));
  pk.pack(std::string("attempt"));
  pk.pack(std::uint32_t{1});
  pk.pack(std::string("wait_ms"));
  pk.pack(std::uint32_t{5000});
  auto old_watch = decode(pack_header(1, "watch_jobs"), std::string(watch.data(), watch.size()));
  REQUIRE_MESSAGE(old_watch.has_value(), old_watch.error().message);
  const auto& read_watch = std::get<WatchJobs>(old_watch->body);
  CHECK(read_watch.jobs.size() == 1);
  CHECK(read_watch.leases.empty());
  CHECK(read_watch.nodes_revision == 0);

  // Its answer, and a node list, from a coordinator built before them.
  msgpack::sbuffer events;
  msgpack::packer<msgpack::sbuffer> events_pk(events);
  events_pk.pack_map(2);
  events_pk.pack(std::string("jobs"));
  events_pk.pack_array(0);
  events_pk.pack(std::string("unknown_job_ids"));
  events_pk.pack_array(0);
  auto old_events = decode(pack_header(1, "job_events"), std::string(events.data(), events.size()));
  REQUIRE_MESSAGE(old_events.has_value(), old_events.error().message);
  CHECK(std::get<JobEvents>(old_events->body).nodes_revision == 0);
  CHECK(std::get<JobEvents>(old_events->body).leases.empty());
  msgpack::sbuffer nodes;
  msgpack::packer<msgpack::sbuffer> nodes_pk(nodes);
  nodes_pk.pack_map(1);
  nodes_pk.pack(std::string("nodes"));
  nodes_pk.pack_array(0);
  auto old_nodes = decode(pack_header(1, "node_list"), std::string(nodes.data(), nodes.size()));
  REQUIRE_MESSAGE(old_nodes.has_value(), old_nodes.error().message);
  CHECK(std::get<NodeList>(old_nodes->body).revision == 0);

  // With them, they go through whole.
  WatchJobs sent;
  sent.leases = {WatchedLease{3, LeaseState::pending}};
  sent.nodes_revision = 1796000000000;
  sent.wait_ms = 5000;
  auto frames = encode(make_envelope(sent, 2));
  REQUIRE(frames.has_value());
  auto read = decode(frames->header, frames->body);
  REQUIRE(read.has_value());
  const auto& round = std::get<WatchJobs>(read->body);
  CHECK(round.jobs.empty());
  REQUIRE(round.leases.size() == 1);
  CHECK(round.leases[0].lease_id == 3);
  CHECK(round.nodes_revision == 1796000000000);
}

TEST_CASE("wrongly typed, missing and out-of-range fields name the field") {
  SUBCASE("wrong type") {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_map(1);
    pk.pack(std::string("job_id"));
    pk.pack(std::string("twelve"));
    auto r = decode(pack_header(1, "get_job"), std::string(buffer.data(), buffer.size()));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message == "get_job message: job_id must be an integer (got string)");
  }
  SUBCASE("missing required field") {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_map(0);
    auto r = decode(pack_header(1, "get_job"), std::string(buffer.data(), buffer.size()));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message == "get_job message: job_id is required but missing");
  }
  SUBCASE("out of range in a nested array element") {
    Hello h = sample_hello();
    h.chips[2].serial = std::string(80, 'x');
    auto refused = encode(make_envelope(h, 1));
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().message.find("chips[2].serial must be 1 to 64 bytes long (got 80)") !=
          std::string::npos);
  }
  SUBCASE("unknown enum value") {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_map(3);
    pk.pack(std::string("node_id"));
    pk.pack(std::string("n1"));
    pk.pack(std::string("drain"));
    pk.pack(true);
    pk.pack(std::string("reason"));
    pk.pack(std::uint32_t{5});
    auto r = decode(pack_header(1, "drain_node"), std::string(buffer.data(), buffer.size()));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message == "drain_node message: reason must be a string (got integer)");
  }
  SUBCASE("negative number for an unsigned field") {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_map(1);
    pk.pack(std::string("job_id"));
    pk.pack(std::int64_t{-4});
    auto r = decode(pack_header(1, "get_job"), std::string(buffer.data(), buffer.size()));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("job_id must be between 1 and") != std::string::npos);
  }
}

TEST_CASE("versions, unknown types and sizes") {
  auto f = encoded(sample_hello());
  SUBCASE("unknown version refused before the body is read") {
    auto r = decode(pack_header(2, "hello"), f.body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::unsupported_version);
    CHECK(r.error().message.find("protocol version 2 is not supported") != std::string::npos);
    auto header = decode_header(pack_header(2, "hello"));
    REQUIRE(header.has_value());
    CHECK(header->v == 2);
  }
  SUBCASE("unknown message type") {
    auto r = decode(pack_header(1, "format_disk"), f.body);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message == "unknown message type 'format_disk'");
  }
  SUBCASE("oversized message") {
    CodecLimits small;
    small.max_message_bytes = 100;
    auto r = decode(f.header, f.body, small);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::too_large);
    auto e = encode(make_envelope(sample_hello(), 1), small);
    REQUIRE_FALSE(e.has_value());
    CHECK(e.error().code == Errc::too_large);
  }
  SUBCASE("trailing bytes") {
    auto r = decode(f.header, f.body + "x");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message.find("trailing bytes") != std::string::npos);
  }
  SUBCASE("body that is not a map") {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> pk(buffer);
    pk.pack_array(0);
    auto r = decode(pack_header(1, "whoami"), std::string(buffer.data(), buffer.size()));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().message == "whoami message: body must be a map (got array)");
  }
  SUBCASE("deeply nested input is bounded") {
    std::string deep(100, '\x91');  // fixarray of one element, nested 100 times
    deep += '\xc0';
    auto r = decode(pack_header(1, "whoami"), deep);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().code == Errc::bad_message);
  }
}
