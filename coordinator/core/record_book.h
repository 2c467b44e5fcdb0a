// The coordinator's qualification records (changes, bundles, accepted baselines, run reports,
// run requests and the qualifiers' claims on them): validated on the way in, saved through the
// core's actions. Pure.
//
// It holds every record it decides by. Run reports (held_in_store_only) are the bulk of the
// history, tens of KB each, and nothing is decided by them: of those it holds only the key and
// seq, and the core reads the documents from the store when asked (action::ReadRecords).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "common/time.h"

namespace kiln::qualification {
struct RiskRegister;
}

namespace kiln::coordinator {

// Run reports: a qualification or stability run's document, written as the run goes and read by
// people and the qualifier, never by the coordinator's own checks.
constexpr bool held_in_store_only(protocol::RecordKind kind) {
  return kind == protocol::RecordKind::qualification_run || kind == protocol::RecordKind::stability_run;
}

using RecordMap = std::map<std::pair<protocol::RecordKind, std::string>, protocol::RecordEntry>;

// The records of `kind` after `after_seq` in seq order, at most `limit`: what a store returns for
// a page of list_records, before page_of.
std::vector<protocol::RecordEntry> records_after(const RecordMap& records, protocol::RecordKind kind,
                                                 std::uint64_t after_seq, std::size_t limit);

// What a store gives back for action::ReadRecords (CoordinatorIo::read_records), from records in
// memory: the simulation's and the tests' store.
std::vector<protocol::RecordEntry> read_from(const RecordMap& records,
                                             const std::variant<protocol::GetRecord, protocol::ListRecords>& query);

// The reply to `request` from `rows` (records_after's, or the store's): at most request.limit,
// within the message budget, `more` when rows were left out or `rows_read_were_cut` (the rows
// were read up to a limit of their own and more may follow).
protocol::RecordList page_of(const protocol::ListRecords& request, std::vector<protocol::RecordEntry> rows,
                             bool rows_read_were_cut);

class RecordBook {
 public:
  // `waiver_register`: the register whose teams' approvers may waive their gates (coordinator.toml
  // risk_register); without one every waiver is refused.
  // Of `recovered` records held in the store only, the documents may be empty (Store::load_live
  // reads their keys and seqs only); they are not kept either way.
  explicit RecordBook(std::vector<protocol::RecordEntry> recovered = {},
                      std::shared_ptr<const qualification::RiskRegister> waiver_register = nullptr);

  // Checks the document for its kind (docs/protocol.md, qualification records): a change or
  // bundle keyed by its id, immutable once written (writing the same content again is fine);
  // a bundle's changes recorded before it, its id the hash of its content; a baseline keyed by
  // revision naming a recorded bundle that supports it; a run report keyed by its run_id; a
  // run request keyed by its run_id naming a recorded bundle, immutable; a run claim of a
  // requested run, refused while another owner's claim has not expired at `now`, stored with
  // its expiry (now + lease_ms); a ticket keyed by its id, the id of its dedupe key: filing one
  // already held keeps the held ticket and state and merges the deliveries (merge_filing in
  // ticket_record.h), so a culprit has one ticket however often it is filed; a waiver keyed by
  // scope/model/metric, stamped with the writer as approver, the gate's owning team and now as its
  // time, refused (unauthorized) unless the writer is an approver of that team in the waiver
  // register, expiring after now and at most 30 days ahead (waiver.h). Returns the record to save.
  Result<protocol::RecordEntry> put(const protocol::PutRecord& put, const std::string& written_by, TimeMs now);
  // A person's state change of a recorded ticket (with_state in ticket_record.h).
  Result<protocol::RecordEntry> set_ticket_state(const protocol::SetTicketState& request, const std::string& written_by,
                                                 TimeMs now);
  // A held record; nullptr when there is none or its kind is held in the store only.
  const protocol::RecordEntry* get(protocol::RecordKind kind, const std::string& key) const;
  // Whether a record held in the store only was written (its document is then read from the store).
  bool in_store(protocol::RecordKind kind, const std::string& key) const;
  // How many records it holds, and of how many run reports it holds the key only.
  std::size_t held_count() const { return records_.size(); }
  std::size_t in_store_count() const { return seq_in_store_.size(); }
  // A page of a kind that is held here (not held_in_store_only).
  protocol::RecordList list(const protocol::ListRecords& request) const;

 private:
  Status check(const protocol::PutRecord& put) const;
  Result<std::string> claim_document(const protocol::PutRecord& put, TimeMs now) const;
  Result<std::string> waiver_document(const protocol::PutRecord& put, const std::string& written_by, TimeMs now) const;
  protocol::RecordEntry store(protocol::RecordKind kind, const std::string& key, std::string document,
                              const std::string& written_by, TimeMs now);

  RecordMap records_;
  // The seq of each record held in the store only: an update keeps it, so readers that page by
  // seq see each run once.
  std::map<std::pair<protocol::RecordKind, std::string>, std::uint64_t> seq_in_store_;
  std::uint64_t next_seq_ = 1;
  std::shared_ptr<const qualification::RiskRegister> waiver_register_;
};

}  // namespace kiln::coordinator
