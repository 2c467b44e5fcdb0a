// Protocol v1: the qualification records clients keep on the coordinator, and the quarantine
// qualification's hardware triage asks for (docs/protocol.md, "Records").
#pragma once

#include "common/protocol/messages_types.h"

namespace kiln::protocol {

// ---- qualification records ---------------------------------------------------------------

// What the coordinator keeps for qualification (docs/qualification.md): merged changes, built
// bundles (key = content hash), the accepted baseline bundle per hardware revision (key = the
// revision) and qualification run reports (key = run id). Changes and bundles are immutable.
// run_request: a run asked of the qualifier; run_claim: which qualifier drives it, until when;
// ticket: a proven problem filed by a qualifier (key = the ticket id), its state set by people.
// promotion: a commit of the environments repository that changed an environment's bundle
// (key = environment@commit; docs/releases.md), immutable.
// waiver: a failing gate let through until an expiry by an approver of its owning team (key =
// scope/model/metric; docs/risks.md), written by a person's key, audited.
// stability_run: a finished stability run (kiln stability) with the gates it judged (key = its
// run id; docs/stability.md), judged again by the qualifier for waivers and pages.
// model_run: one model run of a qualification run whose qualification_run record is its header
// (key = run id/model@revision; docs/qualification.md, "Run records"), listed by key prefix.
enum class RecordKind {
  change,
  bundle,
  baseline,
  qualification_run,
  run_request,
  run_claim,
  ticket,
  promotion,
  waiver,
  stability_run,
  run_cancel,
  model_run
};
constexpr EnumTable<RecordKind, 12> enum_names(RecordKind) {
  return {{
      {RecordKind::change, "change"},
      {RecordKind::bundle, "bundle"},
      {RecordKind::baseline, "baseline"},
      {RecordKind::qualification_run, "qualification_run"},
      {RecordKind::run_request, "run_request"},
      {RecordKind::run_claim, "run_claim"},
      {RecordKind::ticket, "ticket"},
      {RecordKind::promotion, "promotion"},
      {RecordKind::waiver, "waiver"},
      {RecordKind::stability_run, "stability_run"},
      {RecordKind::run_cancel, "run_cancel"},
      {RecordKind::model_run, "model_run"},
  }};
}

// Where a ticket stands: people move it with set_ticket_state; the qualifier only files it.
enum class TicketState { open, acknowledged, fixed, duplicate };
constexpr EnumTable<TicketState, 4> enum_names(TicketState) {
  return {{
      {TicketState::open, "open"},
      {TicketState::acknowledged, "acknowledged"},
      {TicketState::fixed, "fixed"},
      {TicketState::duplicate, "duplicate"},
  }};
}

constexpr Str kRecordKey{1, 128};
constexpr Str kRecordDocument{2, 786432};  // a JSON object; below the 1 MiB message limit

struct PutRecord {
  static constexpr std::string_view kType = "put_record";
  RecordKind kind = RecordKind::change;
  std::string key;
  std::string document;

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
    v.field("document", document, kRecordDocument);
  }
};

struct GetRecord {
  static constexpr std::string_view kType = "get_record";
  RecordKind kind = RecordKind::change;
  std::string key;

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
  }
};

// Records of one kind with after_seq < seq < before_seq (0: no upper bound), in the order they
// were first written, or newest first: a client that needs only the latest reads those. With a
// key_prefix, only the records whose key starts with it (a bundle named by a prefix of its id).
struct ListRecords {
  static constexpr std::string_view kType = "list_records";
  RecordKind kind = RecordKind::change;
  std::uint32_t limit = 1000;
  std::uint64_t after_seq = 0;
  std::uint64_t before_seq = 0;
  bool newest_first = false;
  std::string key_prefix{};  // empty: every key

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("limit", limit, Range{1, 10000});
    v.field("after_seq", after_seq, kU64);
    v.field("before_seq", before_seq, kU64);
    v.field("newest_first", newest_first);
    v.field("key_prefix", key_prefix, Str{0, kRecordKey.max_len});
  }
};

struct RecordEntry {
  static constexpr std::string_view kType = "record_entry";
  RecordKind kind = RecordKind::change;
  std::string key;
  std::string document;
  std::uint64_t seq = 0;  // order of first write, from 1
  std::int64_t updated_at_ms = 0;
  std::string written_by;  // the key that wrote it last

  template <class V>
  void visit(V& v) {
    v.field("kind", kind);
    v.field("key", key, kRecordKey);
    v.field("document", document, kRecordDocument);
    v.field("seq", seq, kU64);
    v.field("updated_at_ms", updated_at_ms, Range{0, INT64_MAX});
    v.field("written_by", written_by, Str{0, 64});
  }
};

// A record_list holds documents of at most this many bytes in all (or a single larger one): well
// below the 1 MiB message limit.
constexpr std::size_t kRecordListBytes = 512 * 1024;

// `more`: the list stopped early (limit or size); ask again from the last seq (after it, or
// before it when newest first).
struct RecordList {
  static constexpr std::string_view kType = "record_list";
  std::vector<RecordEntry> records;
  bool more = false;

  template <class V>
  void visit(V& v) {
    v.field("records", records, Count{0, 10000});
    v.field("more", more);
  }
};

// A person's word on a ticket: acknowledged, fixed, a duplicate of another ticket, or open again.
// Replies with the ticket's record_entry as stored.
struct SetTicketState {
  static constexpr std::string_view kType = "set_ticket_state";
  std::string id;
  TicketState state = TicketState::open;
  std::string duplicate_of;  // the ticket it duplicates: required for duplicate, empty otherwise

  template <class V>
  void visit(V& v) {
    v.field("id", id, kRecordKey);
    v.field("state", state);
    v.field("duplicate_of", duplicate_of, Str{0, 128});
  }
};

// Takes a node out of service until it passes diagnostics (docs/protocol.md §9.7), as a failed
// health probe does: qualification's hardware triage sends it for a node that failed a test
// another node of its revision passed.
struct QuarantineNode {
  static constexpr std::string_view kType = "quarantine_node";
  std::string node_id;
  std::string reason;
  std::string owner;  // who must look: "lab"
  QuarantineCause cause = QuarantineCause::other;
  // wrong_results: the job whose outputs were wrong on this node; a correct rerun of it there
  // (recheck_node) releases the node. 0: none named, only level 3 diagnostics release it.
  std::uint64_t failing_job_id = 0;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
    v.field("reason", reason, Str{1, 4096});
    v.field("owner", owner, Str{1, 64});
    v.field("cause", cause, Optional{});
    v.field("failing_job_id", failing_job_id, Optional{}, kU64);
  }
};

// Reruns, on a node quarantined for wrong results, the job whose outputs were wrong there, on
// the chips it ran on (docs/protocol.md §9.7): correct outputs release the node. Replies
// `job_accepted` with the rerun's id. CI, lab, ops and admin keys.
struct RecheckNode {
  static constexpr std::string_view kType = "recheck_node";
  std::string node_id;

  template <class V>
  void visit(V& v) {
    v.field("node_id", node_id, kIdentifier);
  }
};

// ---- the audit log (docs/protocol.md §16) -------------------------------------------------------

// One line of the append-only audit log: who did what to what, and when. The coordinator writes
// every line. For its own decisions (a grant, a preemption, a quarantine by a probe) the actor
// and role are "coordinator"; for a request, the caller's key and role, never what a client says.
struct AuditEntry {
  std::uint64_t seq = 0;   // order of writing, from 1
  std::int64_t at_ms = 0;  // the coordinator's wall clock, ms since the epoch
  std::string actor;       // a key name, or "coordinator"
  std::string role;        // the key's role, or "coordinator"
  std::string action;      // what was done: lease_requested, preempted, promotion_merged, ... (§16)
  std::string subject;     // what it was done to: "lease L7", "node n03", "environment production"
  std::string detail;

  template <class V>
  void visit(V& v) {
    v.field("seq", seq, kU64);
    v.field("at_ms", at_ms, Range{0, INT64_MAX});
    v.field("actor", actor, kIdentifier);
    v.field("role", role, Str{1, 16});
    v.field("action", action, kIdentifier);
    v.field("subject", subject, Str{1, 256});
    v.field("detail", detail, kMessageText);
  }
};

// The actions a client reports itself, for what it does outside the coordinator (the
// environments repository of `kiln release`); every other action is the coordinator's own (a
// `waiver` is written when the coordinator stores a waiver record, so no client can claim one).
inline constexpr std::string_view kClientAuditActions[] = {
    "bundle_added", "promotion_proposed", "promotion_approved", "promotion_merged",
    "rollback",     "environment_changed", "one_way_override",
};

// Adds a line to the audit log; the coordinator stamps who and when. Replies `ok`.
struct PutAudit {
  static constexpr std::string_view kType = "put_audit";
  std::string action;  // one of kClientAuditActions
  std::string subject;
  std::string detail;

  template <class V>
  void visit(V& v) {
    v.field("action", action, kIdentifier);
    v.field("subject", subject, Str{1, 256});
    v.field("detail", detail, kMessageText);
  }
};

// The risk register the coordinator checks waivers against (coordinator.toml risk_register), as
// its file reads: `kiln waive` takes the gates and their approvers from it. Every client role.
// Replies `risk_register`, or `error` `not_found` when coordinator.toml names none.
struct GetRiskRegister {
  static constexpr std::string_view kType = "get_risk_register";
  template <class V>
  void visit(V&) {}
};

struct RiskRegisterText {
  static constexpr std::string_view kType = "risk_register";
  std::string source;  // the file the coordinator read it from
  std::string toml;    // its text (docs/risks.md)

  template <class V>
  void visit(V& v) {
    v.field("source", source, Str{1, 4096});
    v.field("toml", toml, Str{0, 786432});
  }
};

// The audit log's lines written at or after `since_ms` (wall clock) and after `after_seq`,
// oldest first. Replies `audit_list`; `more`: ask again after the last seq.
struct ListAudit {
  static constexpr std::string_view kType = "list_audit";
  std::int64_t since_ms = 0;
  std::uint64_t after_seq = 0;
  std::uint32_t limit = 1000;

  template <class V>
  void visit(V& v) {
    v.field("since_ms", since_ms, Range{0, INT64_MAX});
    v.field("after_seq", after_seq, kU64);
    v.field("limit", limit, Range{1, 10000});
  }
};

struct AuditList {
  static constexpr std::string_view kType = "audit_list";
  std::vector<AuditEntry> entries;
  bool more = false;

  template <class V>
  void visit(V& v) {
    v.field("entries", entries, Count{0, 10000});
    v.field("more", more);
  }
};

}  // namespace kiln::protocol
