// Qualification records on the coordinator: what CI records (changes, bundles, baselines, run
// reports) is validated, immutable where it must be, saved, and back after a restart; jobs
// carry their bundle; CI can quarantine a node it suspects.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/protocol/codec.h"
#include "common/protocol/json.h"
#include "records/change.h"
#include "records/run_request.h"
#include "records/ticket_record.h"
#include "qualification/waiver.h"
#include "coordinator/store/store.h"
#include "tests/support/temp_dir.h"
#include "tests/support/core_harness.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::coordinator::testing;
using kiln::testing::contains;
using protocol::RecordKind;
using protocol::Role;
namespace q = kiln::qualification;

namespace {

std::vector<q::Change> history() {
  std::vector<q::Change> changes;
  for (int i = 0; i < 3; ++i) {
    q::Change c;
    c.id = "c" + std::to_string(i);
    c.layer = i == 1 ? q::Layer::runtime : q::Layer::kernels;
    c.owner_team = i == 1 ? "runtime-team" : "kernels-team";
    c.components = {"gemm-bf16"};
    c.merged_at_ms = 1000 + i;
    changes.push_back(c);
  }
  changes[2].sim_effect = q::SimChangeEffect{{{"mlp-bf16", 0.97}}, {}, {}};
  return changes;
}

protocol::PutRecord put_change(const q::Change& change) {
  return {RecordKind::change, change.id, q::to_json(change).dump()};
}

protocol::PutRecord put_bundle(const q::Bundle& bundle) {
  return {RecordKind::bundle, bundle.id, q::to_json(bundle).dump()};
}

std::string error_of(const protocol::Body& reply) {
  auto* error = std::get_if<protocol::ErrorReply>(&reply);
  return error ? error->code + ": " + error->message : "";
}

}  // namespace

TEST_CASE("CI records changes and bundles; they are immutable and saved before the reply") {
  Harness h;
  const auto changes = history();
  auto reply = h.client("ci", Role::ci, put_change(changes[0]), 10);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::Ok>(reply), error_of(reply));
  REQUIRE(h.saved_records.size() == 1);
  CHECK(h.saved_records[0].kind == RecordKind::change);
  CHECK(h.saved_records[0].written_by == "ci");

  // The same content again is fine; other content under the same id is a conflict.
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(changes[0]), 11)));
  q::Change edited = changes[0];
  edited.owner_team = "someone-else";
  CHECK(error_of(h.client("ci", Role::ci, put_change(edited), 12)).starts_with("conflict"));

  // Developers read but do not write: refused before the store reads anything for the put.
  const std::size_t reads = h.record_reads;
  CHECK(error_of(h.client("dev", Role::developer, put_change(changes[1]), 13)).starts_with("unauthorized"));
  CHECK(h.record_reads == reads);

  // A bundle whose changes are not all recorded is refused.
  auto bundle = q::build_bundle_at(changes, 2);
  REQUIRE(bundle.has_value());
  CHECK(error_of(h.client("ci", Role::ci, put_bundle(*bundle), 14)).starts_with("not_found"));
  h.client("ci", Role::ci, put_change(changes[1]), 15);
  h.client("ci", Role::ci, put_change(changes[2]), 16);
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_bundle(*bundle), 17)));

  // A bundle that lists its changes (kiln.bundle/1, from a kiln before kiln.bundle/2) is read
  // when recorded before, but no longer taken: it outgrows a record as the history grows.
  q::Bundle listing = *bundle;
  listing.listed_change_ids = std::vector<std::string>{"c0", "c1", "c2"};
  const std::string listed = error_of(h.client("ci", Role::ci, put_bundle(q::seal(listing)), 17));
  CHECK(listed.starts_with("bad_message"));
  CHECK(contains(listed, "kiln bundle build"));

  // A bundle whose id is not the hash of its content is refused.
  q::Bundle tampered = *bundle;
  tampered.change_count -= 1;
  CHECK(error_of(h.client("ci", Role::ci, put_bundle(tampered), 18)).starts_with("integrity"));

  // A change's key must be its id.
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::change, "other", q::to_json(changes[0]).dump()},
                          19))
            .starts_with("invalid_argument"));

  auto list = h.client("dev", Role::developer, protocol::ListRecords{RecordKind::change, 2, 0}, 20);
  REQUIRE(std::holds_alternative<protocol::RecordList>(list));
  const auto& page = std::get<protocol::RecordList>(list);
  REQUIRE(page.records.size() == 2);
  CHECK(page.more);
  CHECK(page.records[0].key == "c0");
  auto rest = std::get<protocol::RecordList>(
      h.client("dev", Role::developer, protocol::ListRecords{RecordKind::change, 10, page.records[1].seq}, 21));
  REQUIRE(rest.records.size() == 1);
  CHECK(rest.records[0].key == "c2");
  CHECK_FALSE(rest.more);
  auto back = q::change_from_json(nlohmann::json::parse(rest.records[0].document));
  REQUIRE(back.has_value());
  CHECK(back->sim_effect->throughput_factors.at("mlp-bf16") == doctest::Approx(0.97));
}

TEST_CASE("run reports are kept in the store only: read back by key and listed a page at a time, also after a restart") {
  Harness h;
  const auto run_doc = [](int i, bool finished) {
    // Tens of KB, as a real report's pages: a page of the list holds a few of them.
    return nlohmann::json{{"run_id", "run-" + std::to_string(i)}, {"finished", finished},
                          {"pages", std::string(40000, 'x')}}
        .dump();
  };
  TimeMs now = 1;
  for (int i = 1; i <= 30; ++i) {
    const auto kind = i % 10 == 0 ? RecordKind::stability_run : RecordKind::qualification_run;
    const std::string doc =
        kind == RecordKind::stability_run
            ? nlohmann::json{{"schema", "kiln.stability-run/1"}, {"run_id", "run-" + std::to_string(i)}, {"models", 1}}
                  .dump()
            : run_doc(i, false);
    REQUIRE(std::holds_alternative<protocol::Ok>(
        h.client("ci", Role::ci, protocol::PutRecord{kind, "run-" + std::to_string(i), doc}, now++)));
  }
  // Each put read back its own record first, which it did not find: the book holds none of them.
  CHECK(h.record_reads == 30);
  CHECK(h.core.held_record_count() == 0);
  // Updated as the run goes: read back, it keeps its seq.
  REQUIRE(std::holds_alternative<protocol::Ok>(
      h.client("ci", Role::ci, protocol::PutRecord{RecordKind::qualification_run, "run-1", run_doc(1, true)}, now++)));
  CHECK(h.record_reads == 31);
  CHECK(h.saved_records.back().seq == 1);

  auto got = h.client("dev", Role::developer, protocol::GetRecord{RecordKind::qualification_run, "run-1"}, now++);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(got));
  CHECK(std::get<protocol::RecordEntry>(got).seq == 1);
  CHECK(nlohmann::json::parse(std::get<protocol::RecordEntry>(got).document).at("finished") == true);
  CHECK(h.record_reads == 32);
  // A report never written is not in the store; one of another kind is not it.
  CHECK(error_of(h.client("dev", Role::developer, protocol::GetRecord{RecordKind::qualification_run, "run-99"}, now++))
            .starts_with("not_found"));
  CHECK(error_of(h.client("dev", Role::developer, protocol::GetRecord{RecordKind::stability_run, "run-1"}, now++))
            .starts_with("not_found"));

  Harness restarted({}, h.store(), now);
  for (Harness* coordinator : {&h, &restarted}) {
    std::vector<std::string> keys;
    std::vector<std::uint64_t> seqs;
    std::uint64_t after = 0;
    std::size_t pages = 0;
    for (bool more = true; more; ++pages) {
      auto reply = coordinator->client("dev", Role::developer, protocol::ListRecords{RecordKind::qualification_run, 1000, after},
                                       now++);
      REQUIRE(std::holds_alternative<protocol::RecordList>(reply));
      auto& page = std::get<protocol::RecordList>(reply);
      REQUIRE_FALSE(page.records.empty());
      for (const auto& record : page.records) {
        keys.push_back(record.key);
        seqs.push_back(record.seq);
        after = record.seq;
      }
      more = page.more;
    }
    CHECK(keys.size() == 27);
    CHECK(keys.front() == "run-1");
    CHECK(keys.back() == "run-29");
    CHECK(std::is_sorted(seqs.begin(), seqs.end()));
    CHECK(pages >= 3);  // 512 KiB a page

    // The latest first, a page at a time below the last seq read: a client that needs the newest
    // few stops early, and one that reads on gets every report once.
    std::vector<std::string> newest;
    std::uint64_t before = 0;
    for (bool more = true; more;) {
      auto reply = coordinator->client(
          "dev", Role::developer, protocol::ListRecords{RecordKind::qualification_run, 1000, 0, before, true}, now++);
      REQUIRE(std::holds_alternative<protocol::RecordList>(reply));
      auto& page = std::get<protocol::RecordList>(reply);
      REQUIRE_FALSE(page.records.empty());
      for (const auto& record : page.records) {
        newest.push_back(record.key);
        before = record.seq;
      }
      more = page.more;
    }
    CHECK(newest == std::vector<std::string>(keys.rbegin(), keys.rend()));
    auto latest = coordinator->client("dev", Role::developer,
                                      protocol::ListRecords{RecordKind::qualification_run, 2, 20, 0, true}, now++);
    REQUIRE(std::holds_alternative<protocol::RecordList>(latest));
    CHECK(std::get<protocol::RecordList>(latest).more);
    CHECK(std::get<protocol::RecordList>(latest).records.front().key == "run-29");
    CHECK(std::get<protocol::RecordList>(latest).records.back().key == "run-28");
  }
  // New reports keep counting after the recovered ones.
  REQUIRE(std::holds_alternative<protocol::Ok>(
      restarted.client("ci", Role::ci, protocol::PutRecord{RecordKind::qualification_run, "run-31", run_doc(31, false)},
                       now++)));
  CHECK(restarted.saved_records.back().seq == 31);

  restarted.record_read_error = "disk I/O error";
  const std::string unavailable =
      error_of(restarted.client("dev", Role::developer, protocol::GetRecord{RecordKind::qualification_run, "run-2"}, now++));
  CHECK(unavailable.starts_with("unavailable"));
  CHECK(contains(unavailable, "disk I/O error"));
  CHECK(contains(unavailable, "check-store"));
  CHECK(error_of(restarted.client("dev", Role::developer, protocol::ListRecords{RecordKind::stability_run, 10, 0}, now++))
            .starts_with("unavailable"));
}

TEST_CASE("a put reads back the records it decides by first; a store that cannot is unavailable") {
  Harness h;
  const auto changes = history();
  // A new record: read back to learn it is new.
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(changes[0]), 1)));
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(changes[1]), 2)));
  CHECK(h.record_reads == 2);
  // Written again: compared with the stored one, read back.
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(changes[0]), 3)));
  CHECK(h.record_reads == 3);
  q::Change edited = changes[0];
  edited.summary = "another summary";
  CHECK(error_of(h.client("ci", Role::ci, put_change(edited), 4)).starts_with("conflict"));
  CHECK(h.record_reads == 4);
  // A bundle: itself, and its last change, which must exist.
  auto bundle = q::build_bundle_at(changes, 1, {});
  REQUIRE(bundle.has_value());
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_bundle(*bundle), 5)));
  CHECK(h.record_reads == 6);
  CHECK(h.core.held_record_count() == 0);

  h.record_read_error = "disk I/O error";
  const std::string unavailable = error_of(h.client("ci", Role::ci, put_change(changes[1]), 6));
  CHECK(unavailable.starts_with("unavailable"));
  CHECK(contains(unavailable, "change c1 is kept in the store only"));
  CHECK(contains(unavailable, "check-store"));
  q::Change fresh = changes[2];
  fresh.id = "c9";
  CHECK(error_of(h.client("ci", Role::ci, put_change(fresh), 7)).starts_with("unavailable"));
  h.record_read_error.reset();
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(changes[1]), 8)));
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_change(fresh), 9)));
  CHECK(h.saved_records.back().seq == 4);  // after c0, c1 and the bundle
}

TEST_CASE("a baseline names a recorded bundle of its revision, and everything is back after a restart") {
  Harness h;
  const auto changes = history();
  for (const auto& change : changes) h.client("ci", Role::ci, put_change(change), 1);
  q::SimBuilderOptions only_a;
  only_a.hardware_revisions = {"a"};
  auto bundle = q::build_bundle_at(changes, 1, only_a);
  REQUIRE(bundle.has_value());
  const std::string doc = nlohmann::json{{"bundle_id", bundle->id}}.dump();
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::baseline, "a", doc}, 2)).starts_with("not_found"));
  h.client("ci", Role::ci, put_bundle(*bundle), 3);
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::baseline, "b", doc}, 4))
            .starts_with("invalid_argument"));
  CHECK(std::holds_alternative<protocol::Ok>(
      h.client("ci", Role::ci, protocol::PutRecord{RecordKind::baseline, "a", doc}, 5)));
  const std::string run = nlohmann::json{{"run_id", "nightly-1"}, {"finished", false}}.dump();
  CHECK(std::holds_alternative<protocol::Ok>(
      h.client("ci", Role::ci, protocol::PutRecord{RecordKind::qualification_run, "nightly-1", run}, 6)));
  const std::string done = nlohmann::json{{"run_id", "nightly-1"}, {"finished", true}}.dump();
  CHECK(std::holds_alternative<protocol::Ok>(
      h.client("ci", Role::ci, protocol::PutRecord{RecordKind::qualification_run, "nightly-1", done}, 7)));

  const Snapshot snapshot = h.store();
  Harness restarted({}, snapshot, 100);
  auto got = restarted.client("dev", Role::developer, protocol::GetRecord{RecordKind::qualification_run, "nightly-1"}, 101);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(got));
  CHECK(nlohmann::json::parse(std::get<protocol::RecordEntry>(got).document).at("finished") == true);
  auto baseline = restarted.client("dev", Role::developer, protocol::GetRecord{RecordKind::baseline, "a"}, 102);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(baseline));
  // New records keep counting after the recovered ones.
  q::Change more = changes[2];
  more.id = "c3";
  more.merged_at_ms = 2000;
  restarted.client("ci", Role::ci, put_change(more), 103);
  std::uint64_t highest_before = 0;
  for (const auto& record : snapshot.records) highest_before = std::max(highest_before, record.seq);
  REQUIRE(restarted.saved_records.size() == 1);
  CHECK(restarted.saved_records[0].seq > highest_before);
}

TEST_CASE("a job records the bundle and config hash it was submitted with") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  protocol::SubmitJob job;
  job.workload = "model";
  job.priority_class = protocol::PriorityClass::nightly;
  job.bundle_id = std::string(64, 'a');
  job.config_hash = std::string(64, 'b');
  const auto id = h.submit("ci", Role::ci, job, 1);
  CHECK(h.job(id).summary.bundle_id == job.bundle_id);
  CHECK(h.job(id).summary.config_hash == job.config_hash);
  auto detail = std::get<protocol::JobDetail>(h.client("ci", Role::ci, protocol::GetJob{id}, 2));
  CHECK(detail.job.bundle_id == job.bundle_id);
}

TEST_CASE("CI quarantines a node it suspects; it returns only through diagnostics") {
  Harness h;
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const protocol::QuarantineNode quarantine{"n01", "failed mlp-bf16-small-01, passed on n02", "lab"};
  CHECK(error_of(h.client("dev", Role::developer, quarantine, 1)).starts_with("unauthorized"));
  CHECK(error_of(h.client("ci", Role::ci, protocol::QuarantineNode{"n99", "x", "lab"}, 2)).starts_with("not_found"));
  auto reply = h.client("ci", Role::ci, quarantine, 3);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::Ok>(reply), error_of(reply));
  const auto& node = h.core.nodes().at("n01");
  CHECK(node.summary.state == protocol::NodeState::quarantined);
  CHECK(node.summary.quarantine_owner == "lab");
  CHECK(node.summary.quarantine_reason.find("passed on n02") != std::string::npos);
  // No new work lands there.
  protocol::SubmitJob job;
  job.workload = "model";
  job.priority_class = protocol::PriorityClass::nightly;
  const auto id = h.submit("ci", Role::ci, job, 4);
  CHECK(h.job(id).summary.state == protocol::JobState::queued);
}

TEST_CASE("a ticket is filed once per culprit; people, not the qualifier, set its state; it survives a restart") {
  Harness h;
  const q::Change c07{"c07", q::Layer::compiler, "compiler-team", {"gemm-bf16"}, 1000, "fuse", std::nullopt};
  const auto filing = [&](const std::string& run_id, kiln::TimeMs at_ms) {
    const q::Ticket ticket = q::make_culprit_ticket(c07, q::TicketKind::performance_regression, "slower", "{}", at_ms);
    return protocol::PutRecord{RecordKind::ticket, ticket.id,
                               q::to_json(q::new_ticket_record(ticket, run_id, {"webhook"})).dump()};
  };
  const protocol::PutRecord first = filing("nightly-1", 10);
  auto reply = h.client("ci", Role::ci, first, 1);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::Ok>(reply), error_of(reply));
  // Filed again by a later run: still the first filing, one record.
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, filing("nightly-2", 20), 2)));
  auto list = std::get<protocol::RecordList>(h.client("dev", Role::developer, protocol::ListRecords{RecordKind::ticket}, 3));
  REQUIRE(list.records.size() == 1);
  CHECK(q::ticket_record_from_json(nlohmann::json::parse(list.records[0].document))->run_id == "nightly-1");
  // Held whole, and listed newest first as the kinds kept in the store are.
  const q::Change c08{"c08", q::Layer::kernels, "kernels-team", {"gemm-bf16"}, 2000, "tile", std::nullopt};
  const q::Ticket second = q::make_culprit_ticket(c08, q::TicketKind::correctness_regression, "wrong", "{}", 30);
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client(
      "ci", Role::ci,
      protocol::PutRecord{RecordKind::ticket, second.id,
                          q::to_json(q::new_ticket_record(second, "nightly-2", {"webhook"})).dump()},
      3)));
  auto newest =
      std::get<protocol::RecordList>(h.client("dev", Role::developer, protocol::ListRecords{RecordKind::ticket, 1, 0, 0, true}, 3));
  REQUIRE(newest.records.size() == 1);
  CHECK(newest.records[0].key == second.id);
  CHECK(newest.more);
  auto older = std::get<protocol::RecordList>(h.client(
      "dev", Role::developer, protocol::ListRecords{RecordKind::ticket, 1, 0, newest.records[0].seq, true}, 3));
  REQUIRE(older.records.size() == 1);
  CHECK(older.records[0].key == first.key);
  CHECK_FALSE(older.more);
  // By a prefix of the key, as the kinds kept in the store are listed too.
  protocol::ListRecords by_prefix{RecordKind::ticket};
  by_prefix.key_prefix = second.id.substr(0, second.id.size() - 1);
  auto prefixed = std::get<protocol::RecordList>(h.client("dev", Role::developer, by_prefix, 3));
  REQUIRE(prefixed.records.size() == 1);
  CHECK(prefixed.records[0].key == second.id);
  by_prefix.key_prefix = second.id + "x";
  CHECK(std::get<protocol::RecordList>(h.client("dev", Role::developer, by_prefix, 3)).records.empty());
  // A ticket whose key is not its id is refused.
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::ticket, "kiln-x", first.document}, 4))
            .starts_with("invalid_argument"));

  const protocol::SetTicketState ack{first.key, protocol::TicketState::acknowledged, ""};
  CHECK(error_of(h.client("ci", Role::ci, ack, 5)).starts_with("unauthorized"));
  CHECK(error_of(h.client("dev", Role::developer, protocol::SetTicketState{"kiln-0000000000000000",
                                                                           protocol::TicketState::fixed, ""},
                          6))
            .starts_with("not_found"));
  auto acked = h.client("dev", Role::developer, ack, 7);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::RecordEntry>(acked), error_of(acked));
  CHECK(std::get<protocol::RecordEntry>(acked).written_by == "dev");
  // The qualifier recording a delivery does not undo a person's state.
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, filing("nightly-1", 10), 8)));
  auto held = q::ticket_record_from_json(nlohmann::json::parse(h.saved_records.back().document));
  CHECK(held->state == q::TicketState::acknowledged);
  CHECK(held->state_set_by == "dev");

  Harness restarted({}, h.store(), 100);
  auto got = restarted.client("lab", Role::lab, protocol::GetRecord{RecordKind::ticket, first.key}, 101);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(got));
  CHECK(q::ticket_record_from_json(nlohmann::json::parse(std::get<protocol::RecordEntry>(got).document))->state ==
        q::TicketState::acknowledged);
}

TEST_CASE("record messages round-trip through the codec") {
  auto round_trip = [](const protocol::Body& body) {
    auto frames = protocol::encode(protocol::make_envelope(body, 1));
    REQUIRE_MESSAGE(frames.has_value(), frames.error().message);
    auto decoded = protocol::decode(frames->header, frames->body);
    REQUIRE_MESSAGE(decoded.has_value(), decoded.error().message);
    return decoded->body;
  };
  const protocol::RecordEntry entry{RecordKind::bundle, "abc", "{\"x\":1}", 4, 99, "ci"};
  const auto list = std::get<protocol::RecordList>(round_trip(protocol::RecordList{{entry, entry}, true}));
  CHECK(list.more);
  CHECK(protocol::to_json(list.records[1]) == protocol::to_json(entry));
  CHECK(std::get<protocol::PutRecord>(round_trip(protocol::PutRecord{RecordKind::baseline, "a", "{}"})).key == "a");
  CHECK(std::get<protocol::QuarantineNode>(round_trip(protocol::QuarantineNode{"n01", "why", "lab"})).owner == "lab");
  const auto state = std::get<protocol::SetTicketState>(
      round_trip(protocol::SetTicketState{"kiln-1", protocol::TicketState::duplicate, "kiln-2"}));
  CHECK(state.state == protocol::TicketState::duplicate);
  CHECK(state.duplicate_of == "kiln-2");
  // An empty key is refused, naming the field.
  auto bad = protocol::encode(protocol::make_envelope(protocol::GetRecord{RecordKind::change, ""}, 1));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("key") != std::string::npos);
}

TEST_CASE("the SQLite store keeps qualification records") {
  kiln::testing::TempDir dir("kiln-records");
  const std::string path = (dir.path() / "kiln.db").string();
  {
    auto store = open_sqlite_store(path);
    REQUIRE(store.has_value());
    REQUIRE((*store)->save_record({RecordKind::change, "c1", "{\"v\":1}", 1, 5, "ci"}).has_value());
    REQUIRE((*store)->save_record({RecordKind::change, "c1", "{\"v\":1}", 1, 5, "ci"}).has_value());
    REQUIRE((*store)->save_record({RecordKind::qualification_run, "r1", "{\"v\":2}", 2, 6, "ci"}).has_value());
  }
  auto store = open_sqlite_store(path);
  REQUIRE(store.has_value());
  auto snapshot = (*store)->load();
  REQUIRE(snapshot.has_value());
  REQUIRE(snapshot->records.size() == 2);
  CHECK(snapshot->records[0].key == "c1");
  CHECK(snapshot->records[1].document == "{\"v\":2}");
}

namespace {

protocol::PutRecord put_claim(const std::string& run_id, const std::string& owner, DurationMs lease_ms) {
  return {RecordKind::run_claim, run_id, q::to_json(q::RunClaim{run_id, owner, lease_ms, 0}).dump()};
}

q::RunClaim claim_of(Harness& h, const std::string& run_id, Now now) {
  auto got = h.client("dev", Role::developer, protocol::GetRecord{RecordKind::run_claim, run_id}, now);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(got));
  auto claim = q::run_claim_from_json(nlohmann::json::parse(std::get<protocol::RecordEntry>(got).document));
  REQUIRE(claim.has_value());
  return *claim;
}

}  // namespace

TEST_CASE("a run request names a recorded bundle and never changes; a claim on it holds until it expires") {
  Harness h;
  const auto changes = history();
  for (const auto& change : changes) h.client("ci", Role::ci, put_change(change), 1);
  auto bundle = q::build_bundle_at(changes, 2);
  REQUIRE(bundle.has_value());
  q::RunRequest request;
  request.run_id = "nightly-1";
  request.bundle_id = bundle->id;
  const protocol::PutRecord put_request{RecordKind::run_request, "nightly-1", q::to_json(request).dump()};

  // Claims only for requested runs; requests only for recorded bundles.
  CHECK(error_of(h.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 2)).starts_with("not_found"));
  CHECK(error_of(h.client("ci", Role::ci, put_request, 3)).starts_with("not_found"));
  h.client("ci", Role::ci, put_bundle(*bundle), 4);
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_request, 5)));
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, put_request, 6)));  // asked again: the same
  q::RunRequest other = request;
  other.repeats = 20;
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::run_request, "nightly-1", q::to_json(other).dump()}, 7))
            .starts_with("conflict"));
  nlohmann::json bad_tier = q::to_json(request);
  bad_tier["tier"] = "weekly";
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::run_request, "nightly-1", bad_tier.dump()}, 8))
            .starts_with("invalid_argument"));
  CHECK(error_of(h.client("dev", Role::developer, put_request, 9)).starts_with("unauthorized"));

  // The first claim wins; the expiry is on the coordinator's clock, whatever the claimant thinks.
  CHECK(std::holds_alternative<protocol::Ok>(h.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 1000)));
  CHECK(claim_of(h, "nightly-1", 1001).expires_at_ms == 6000);
  CHECK(error_of(h.client("q2", Role::ci, put_claim("nightly-1", "q2/20", 5000), 2000)).starts_with("conflict"));
  // Its owner renews it; the other owner is refused until the renewed claim expires.
  CHECK(std::holds_alternative<protocol::Ok>(h.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 4000)));
  CHECK(claim_of(h, "nightly-1", 4001).expires_at_ms == 9000);
  CHECK(error_of(h.client("q2", Role::ci, put_claim("nightly-1", "q2/20", 5000), 8999)).starts_with("conflict"));
  CHECK(claim_of(h, "nightly-1", 8999).owner == "q1/10");
  // Expired: the other qualifier takes it over, and now the first one is refused.
  CHECK(std::holds_alternative<protocol::Ok>(h.client("q2", Role::ci, put_claim("nightly-1", "q2/20", 5000), 9000)));
  CHECK(error_of(h.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 9001)).starts_with("conflict"));

  // A claim must say how long it holds, within bounds.
  CHECK(error_of(h.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 10), 9002)).starts_with("invalid_argument"));

  // After a restart the claim and its expiry are back: still refused until then.
  Harness restarted({}, h.store(), 9100);
  CHECK(error_of(restarted.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 9200)).starts_with("conflict"));
  CHECK(std::holds_alternative<protocol::Ok>(
      restarted.client("q1", Role::ci, put_claim("nightly-1", "q1/10", 5000), 14000)));
}

TEST_CASE("a cancel names a requested run; the first one stands, its writer named") {
  Harness h;
  const auto changes = history();
  for (const auto& change : changes) h.client("ci", Role::ci, put_change(change), 1);
  auto bundle = q::build_bundle_at(changes, 2);
  REQUIRE(bundle.has_value());
  h.client("ci", Role::ci, put_bundle(*bundle), 2);
  const auto cancel = [](const std::string& run_id) {
    return protocol::PutRecord{RecordKind::run_cancel, run_id, nlohmann::json{{"run_id", run_id}}.dump()};
  };
  CHECK(error_of(h.client("ci", Role::ci, cancel("nightly-1"), 3))
            .starts_with("not_found: no run nightly-1 was requested"));
  q::RunRequest request;
  request.run_id = "nightly-1";
  request.bundle_id = bundle->id;
  h.client("ci", Role::ci, protocol::PutRecord{RecordKind::run_request, "nightly-1", q::to_json(request).dump()}, 4);
  CHECK(error_of(h.client("dev", Role::developer, cancel("nightly-1"), 5)).starts_with("unauthorized"));
  const protocol::PutRecord other_key{RecordKind::run_cancel, "nightly-1", "{\"run_id\": \"x\"}"};
  CHECK(error_of(h.client("ci", Role::ci, other_key, 6)).starts_with("invalid_argument"));
  CHECK(std::holds_alternative<protocol::Ok>(h.client("alice", Role::ops, cancel("nightly-1"), 7)));
  CHECK(std::holds_alternative<protocol::Ok>(h.client("ci", Role::ci, cancel("nightly-1"), 8)));
  auto got = h.client("ci", Role::ci, protocol::GetRecord{RecordKind::run_cancel, "nightly-1"}, 9);
  REQUIRE(std::holds_alternative<protocol::RecordEntry>(got));
  CHECK(std::get<protocol::RecordEntry>(got).written_by == "alice");
}

// The register the coordinator checks waivers against: mei and jonas approve for kernels, whose
// risk gates moe-large throughput.
std::shared_ptr<const q::RiskRegister> kernels_register() {
  auto reg = q::parse_risk_register(R"(
model_set = "set.toml"
[[team]]
name = "kernels"
approvers = ["mei", "jonas"]
[[team]]
name = "compiler"
approvers = ["priya"]
[[risk]]
id = "moe-tiles"
title = "MoE tiles lose throughput"
owner_team = "kernels"
layer = "kernels"
tier = "nightly"
gate = { model = "moe-large", metric = "throughput" }
page = { team = "kernels", severity = "sev2" }
)",
                                    "risks.toml");
  REQUIRE_MESSAGE(reg, reg.error().message);
  return std::make_shared<const q::RiskRegister>(std::move(*reg));
}

TEST_CASE("a waiver is a person's word: stamped with its key and the coordinator's time, bounded, audited, kept") {
  Harness h({}, {}, 0, kernels_register());
  const kiln::TimeMs now = 1'800'000'000'000;
  const kiln::TimeMs day = 24 * 3600 * 1000;
  const auto put = [&](kiln::TimeMs expires_at_ms, std::string reason = "4% low, fix in c9") {
    const q::Waiver w{"release-7", "moe-large", q::GateMetric::throughput, "kernels", "someone else", std::move(reason),
                      0, expires_at_ms, "", 0};
    return protocol::PutRecord{RecordKind::waiver, q::waiver_key(w), q::to_json(w).dump()};
  };
  CHECK(error_of(h.client("ci", Role::ci, put(now + day), now)).starts_with("unauthorized"));
  CHECK(error_of(h.client("mei", Role::developer, put(now + day, ""), now)).starts_with("invalid_argument"));
  CHECK(error_of(h.client("mei", Role::developer, put(now - 1), now)).find("not in the future") != std::string::npos);
  CHECK(error_of(h.client("mei", Role::developer, put(now + 31 * day), now)).find("30 days") != std::string::npos);
  auto bad_key = put(now + day);
  bad_key.key = "release-7/moe-large/eval";
  CHECK(error_of(h.client("mei", Role::developer, bad_key, now)).starts_with("invalid_argument"));
  CHECK(h.audit.empty());

  auto reply = h.client("mei", Role::developer, put(now + day), now);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::Ok>(reply), error_of(reply));
  auto stored = q::waiver_from_json(nlohmann::json::parse(h.saved_records.back().document));
  REQUIRE(stored);
  CHECK(stored->approver == "mei");  // not what the document said
  CHECK(stored->created_at_ms == now);
  REQUIRE(h.audit.size() == 1);
  CHECK(h.audit[0].action == "waiver");
  CHECK(h.audit[0].actor == "mei");
  CHECK(h.audit[0].subject == "gate moe-large throughput");
  CHECK(h.audit[0].detail.find("waived by mei until ") != std::string::npos);
  // A client cannot write a waiver line of its own.
  CHECK(error_of(h.client("mei", Role::developer, protocol::PutAudit{"waiver", "gate x", "forged"}, now))
            .starts_with("invalid_argument"));

  Harness restarted({}, h.store(), now + 1);
  auto got = restarted.client("ops", Role::ops, protocol::ListRecords{RecordKind::waiver}, now + 2);
  REQUIRE(std::get<protocol::RecordList>(got).records.size() == 1);
}

TEST_CASE("the coordinator takes a waiver only from an approver of the gate's owning team in its register") {
  const kiln::TimeMs now = 1'800'000'000'000;
  const kiln::TimeMs day = 24 * 3600 * 1000;
  // What a client that skips its own check of the register would send: any team, any approver.
  const auto put = [&](std::string scope, std::string team) {
    const q::Waiver w{std::move(scope), "moe-large", q::GateMetric::throughput, std::move(team), "mei",
                      "4% low, fix in c9", 0, now + day, "", 0};
    return protocol::PutRecord{RecordKind::waiver, q::waiver_key(w), q::to_json(w).dump()};
  };
  Harness h({}, {}, 0, kernels_register());
  // An approver of another team, and a key of no team, are refused, and told whom to ask.
  for (const std::string key : {"priya", "bystander"}) {
    const std::string refused = error_of(h.client(key, Role::developer, put("nightly-3", "kernels"), now));
    CHECK(refused.starts_with("unauthorized"));
    CHECK(refused.find(key + " is not an approver of the team that owns the gate moe-large throughput; ask one of "
                       "kernels (mei, jonas)") != std::string::npos);
  }
  // A gate no risk of the register covers has no owner to waive it.
  auto uncovered = put("nightly-3", "kernels");
  auto doc = nlohmann::json::parse(uncovered.document);
  doc["model"] = "bert-large";
  uncovered.document = doc.dump();
  uncovered.key = "nightly-3/bert-large/throughput";
  CHECK(error_of(h.client("mei", Role::developer, uncovered, now)).starts_with("not_found"));
  CHECK(h.saved_records.empty());
  CHECK(h.audit.empty());

  // An approver's waiver is stored with the owning team the register names, whatever was sent.
  auto reply = h.client("jonas", Role::developer, put("moe-tiles", "compiler"), now);
  REQUIRE_MESSAGE(std::holds_alternative<protocol::Ok>(reply), error_of(reply));
  auto stored = q::waiver_from_json(nlohmann::json::parse(h.saved_records.back().document));
  REQUIRE(stored);
  CHECK(stored->approver == "jonas");
  CHECK(stored->team == "kernels");

  // A coordinator with no register takes no waiver at all, and says how to give it one.
  Harness without;
  const std::string refused = error_of(without.client("mei", Role::developer, put("nightly-3", "kernels"), now));
  CHECK(refused.starts_with("unauthorized"));
  CHECK(refused.find("set [coordinator] risk_register") != std::string::npos);
}

TEST_CASE("a waiver replaced is audited as replacing the earlier one; a withdrawn one is kept, marked and audited") {
  Harness h({}, {}, 0, kernels_register());
  const kiln::TimeMs now = 1'800'000'000'000;
  const kiln::TimeMs day = 24 * 3600 * 1000;
  const q::Waiver week{"nightly-3", "moe-large", q::GateMetric::throughput, "kernels", "", "4% low, fix in c9", 0,
                       now + 7 * day, "", 0};
  const std::string key = q::waiver_key(week);
  const auto put = [&](const q::Waiver& w) {
    return protocol::PutRecord{RecordKind::waiver, q::waiver_key(w), q::to_json(w).dump()};
  };
  // What `kiln waiver withdraw` sends: the held document, naming who asks.
  const auto withdrawal = [&](const std::string& by) {
    auto held = q::waiver_from_json(nlohmann::json::parse(h.saved_records.back().document));
    REQUIRE(held);
    held->withdrawn_by = by;
    return put(*held);
  };
  const auto stored = [&] {
    auto w = q::waiver_from_json(nlohmann::json::parse(h.saved_records.back().document));
    REQUIRE(w);
    return *w;
  };
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("mei", Role::developer, put(week), now)));
  auto briefly = week;
  briefly.expires_at_ms = now + 1000 + 45'000;
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("jonas", Role::developer, put(briefly), now + 1000)));
  REQUIRE(h.audit.size() == 2);
  CHECK(h.audit[1].action == "waiver_replaced");
  CHECK(h.audit[1].actor == "jonas");
  CHECK(h.audit[1].detail.find("waived by jonas until ") != std::string::npos);
  CHECK(h.audit[1].detail.find(", replacing waived by mei until ") != std::string::npos);
  CHECK(stored().created_at_ms == now + 1000);

  // Only an approver of the team that waived it, or an admin, withdraws it.
  CHECK(error_of(h.client("priya", Role::developer, withdrawal("priya"), now + 2000)).starts_with("unauthorized"));
  CHECK(error_of(h.client("alice", Role::ops, withdrawal("alice"), now + 2000)).find("or an admin") !=
        std::string::npos);
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("mei", Role::developer, withdrawal("someone"), now + 2000)));
  const q::Waiver withdrawn = stored();
  CHECK(withdrawn.withdrawn_by == "mei");  // the coordinator's word, not the document's
  CHECK(withdrawn.withdrawn_at_ms == now + 2000);
  CHECK(withdrawn.approver == "jonas");
  CHECK(!q::in_force(withdrawn, now + 2000));
  REQUIRE(h.audit.size() == 3);
  CHECK(h.audit[2].action == "waiver_withdrawn");
  CHECK(h.audit[2].actor == "mei");
  CHECK(h.audit[2].subject == "gate moe-large throughput");
  CHECK(h.audit[2].detail.find("withdrew waived by jonas until ") != std::string::npos);
  // Withdrawn once is withdrawn: nothing left to withdraw.
  CHECK(error_of(h.client("mei", Role::developer, withdrawal("mei"), now + 3000)).starts_with("conflict"));

  // A new waiver of the gate replaces the withdrawn one (said so), and an admin may withdraw it.
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("jonas", Role::developer, put(week), now + 4000)));
  CHECK(stored().withdrawn_by.empty());
  CHECK(h.audit[3].action == "waiver_replaced");
  CHECK(h.audit[3].detail.find("(no longer in force)") != std::string::npos);
  REQUIRE(std::holds_alternative<protocol::Ok>(h.client("root", Role::admin, withdrawal("root"), now + 5000)));
  CHECK(stored().withdrawn_by == "root");
  auto other = week;
  other.scope = "nightly-4";
  CHECK(error_of(h.client("mei", Role::developer, [&] {
          auto w = other;
          w.withdrawn_by = "mei";
          return put(w);
        }(), now + 6000)).starts_with("not_found"));
}

TEST_CASE("puts of one record that come before any read back are taken in order, as if one by one") {
  Harness h;
  const auto changes = history();
  q::Change edited = changes[0];
  edited.summary = "another summary";
  const auto report = [](bool finished) {
    return protocol::PutRecord{RecordKind::qualification_run, "run-1",
                               nlohmann::json{{"run_id", "run-1"}, {"finished", finished}}.dump()};
  };
  // Four puts reach the core before the store reads any record back for them (a shell that
  // carries out actions once per batch of messages).
  const std::size_t before = h.to_clients.size();
  for (protocol::Body body : std::vector<protocol::Body>{put_change(changes[0]), put_change(edited), report(false),
                                                         report(true)}) {
    h.core.on_client_message("c-ci", Caller{"ci", Role::ci}, protocol::make_envelope(std::move(body), h.next_id++), 1);
  }
  h.drain();
  REQUIRE(h.to_clients.size() == before + 4);
  CHECK(std::holds_alternative<protocol::Ok>(h.to_clients[before].body));
  // The second change is compared with the first, although the store had neither when both were read.
  CHECK(error_of(h.to_clients[before + 1].body).starts_with("conflict"));
  CHECK(std::holds_alternative<protocol::Ok>(h.to_clients[before + 2].body));
  CHECK(std::holds_alternative<protocol::Ok>(h.to_clients[before + 3].body));
  // The report rewritten keeps the seq it was first written with, and ends finished.
  REQUIRE(h.saved_records.size() == 3);
  CHECK(h.saved_records[1].seq == h.saved_records[2].seq);
  CHECK(h.saved_records[0].seq != h.saved_records[1].seq);
  CHECK(nlohmann::json::parse(h.stored_records.at({RecordKind::qualification_run, "run-1"}).document).at("finished") ==
        true);
  CHECK(nlohmann::json::parse(h.stored_records.at({RecordKind::change, "c0"}).document).at("summary") ==
        changes[0].summary);
  CHECK(h.core.held_record_count() == 0);
}

TEST_CASE("a model run is kept under its run's id and listed by that prefix, a page at a time") {
  Harness h;
  TimeMs now = 1;
  const auto model_run = [](const std::string& run_id, int position) {
    return nlohmann::json{{"schema", "kiln.model-run/1"}, {"run_id", run_id}, {"position", position},
                          {"entry", {{"model", "m" + std::to_string(position)}, {"detail", std::string(20000, 'd')}}}}
        .dump();
  };
  for (int i = 0; i < 60; ++i) {
    for (const std::string run_id : {"nightly-1", "nightly-10"}) {
      REQUIRE(std::holds_alternative<protocol::Ok>(h.client(
          "ci", Role::ci,
          protocol::PutRecord{RecordKind::model_run, run_id + "/m" + std::to_string(i) + "@a", model_run(run_id, i)},
          now++)));
    }
  }
  // Its key names its run first: another run's, or nothing after the run, is refused.
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::model_run, "nightly-2/m0@a",
                                                              model_run("nightly-1", 0)},
                          now++))
            .starts_with("invalid_argument"));
  CHECK(error_of(h.client("ci", Role::ci, protocol::PutRecord{RecordKind::model_run, "nightly-1/", model_run("nightly-1", 0)},
                          now++))
            .starts_with("invalid_argument"));
  // The run's model runs only (not nightly-10's), in the order written, a page within the budget.
  protocol::ListRecords query{RecordKind::model_run, 10000};
  query.key_prefix = "nightly-1/";
  std::vector<std::string> keys;
  int pages = 0;
  for (;;) {
    auto reply = h.client("dev", Role::developer, query, now++);
    REQUIRE(std::holds_alternative<protocol::RecordList>(reply));
    const auto& page = std::get<protocol::RecordList>(reply);
    ++pages;
    for (const auto& record : page.records) keys.push_back(record.key);
    if (!page.more || page.records.empty()) break;
    query.after_seq = page.records.back().seq;
  }
  REQUIRE(keys.size() == 60);
  CHECK(keys.front() == "nightly-1/m0@a");
  CHECK(keys.back() == "nightly-1/m59@a");
  CHECK(pages > 1);
}
