// The coordinator's qualification records (changes, bundles, accepted baselines, run reports,
// run requests and the qualifiers' claims on them): validated on the way in, saved through the
// core's actions. Pure.
//
// The records grow with every run (a change, its bundle, the run's request, claim and report), so
// the book holds the documents of the few kinds it reads on most puts (held_in_memory: tickets,
// baselines, waivers) and nothing of every other record: its memory does not grow with the
// history. The core reads those from the store when asked (action::ReadRecords), and before
// taking a put reads back the records it decides by (records_needed, action::RecallRecord): the
// put's own record (whether it exists, and so its seq; an immutable one's content; a claim's
// holder) and the records it names (a bundle's last change, a request's bundle, a claim's
// request, a baseline's bundle).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
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

// Few however long kiln runs (a ticket per culprit, a baseline per revision, waivers of at most 30
// days), and read by puts of other kinds: their documents are held.
constexpr bool held_in_memory(protocol::RecordKind kind) {
  return kind == protocol::RecordKind::ticket || kind == protocol::RecordKind::baseline ||
         kind == protocol::RecordKind::waiver;
}
constexpr bool held_in_store_only(protocol::RecordKind kind) { return !held_in_memory(kind); }

using RecordMap = std::map<std::pair<protocol::RecordKind, std::string>, protocol::RecordEntry>;

// The records of `range`'s kind within its seqs and with its key prefix, in its order, at most
// `limit`: what a store returns for a page of list_records, before page_of.
std::vector<protocol::RecordEntry> records_in(const RecordMap& records, const protocol::ListRecords& range,
                                              std::size_t limit);

// What a store gives back for action::ReadRecords (CoordinatorIo::read_records), from records in
// memory: the simulation's and the tests' store.
std::vector<protocol::RecordEntry> read_from(const RecordMap& records,
                                             const std::variant<protocol::GetRecord, protocol::ListRecords>& query);

// The reply to `request` from `rows` (records_in's, or the store's): at most request.limit,
// within the message budget, `more` when rows were left out or `rows_read_were_cut` (the rows
// were read up to a limit of their own and more may follow).
protocol::RecordList page_of(const protocol::ListRecords& request, std::vector<protocol::RecordEntry> rows,
                             bool rows_read_were_cut);

class RecordBook {
 public:
  // `waiver_register`: the register whose teams' approvers may waive their gates (coordinator.toml
  // risk_register); without one every waiver is refused.
  // Of `recovered` records held in the store only, only the seq is read (the next record's comes
  // after it); Store::load_live gives the newest of each kind, without its document.
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
  // register, expiring after now and at most 30 days ahead (waiver.h); a waiver document naming
  // who withdrew it withdraws the waiver in force under its key instead, when the writer is an
  // approver of the team that waived it or an admin (`written_by_admin`), stamped with the writer
  // and now. Returns the record to save.
  Result<protocol::RecordEntry> put(const protocol::PutRecord& put, const std::string& written_by,
                                    bool written_by_admin, TimeMs now);
  // A person's state change of a recorded ticket (with_state in ticket_record.h).
  Result<protocol::RecordEntry> set_ticket_state(const protocol::SetTicketState& request, const std::string& written_by,
                                                 TimeMs now);
  // The records held in the store only that put() decides by and the book does not know now: the
  // core reads them back first (take_recalled, take_absent).
  std::vector<std::pair<protocol::RecordKind, std::string>> records_needed(const protocol::PutRecord& put) const;
  // A record read back for records_needed, or the word that the store holds none: known, with the
  // records put since, until forget_recalled(). The core calls that when no put waits for a read:
  // every read it asks for later is made after the writes of those puts, so between two events
  // only held_in_memory documents are held.
  void take_recalled(protocol::RecordEntry record);
  void take_absent(protocol::RecordKind kind, const std::string& key);
  void forget_recalled();
  // A held or known document; nullptr when there is none or it is in the store only.
  const protocol::RecordEntry* get(protocol::RecordKind kind, const std::string& key) const;
  // The register waivers are checked against; nullptr when coordinator.toml names none.
  const qualification::RiskRegister* waiver_register() const { return waiver_register_.get(); }
  // How many documents it holds.
  std::size_t held_count() const { return records_.size(); }
  // A page of a kind held in memory.
  protocol::RecordList list(const protocol::ListRecords& request) const;

 private:
  Status check(const protocol::PutRecord& put) const;
  Result<std::string> claim_document(const protocol::PutRecord& put, TimeMs now) const;
  Result<std::string> waiver_document(const protocol::PutRecord& put, const std::string& written_by,
                                      bool written_by_admin, TimeMs now) const;
  Result<std::string> withdrawal_document(const std::string& key, const std::string& written_by, bool written_by_admin,
                                          TimeMs now) const;
  protocol::RecordEntry store(protocol::RecordKind kind, const std::string& key, std::string document,
                              const std::string& written_by, TimeMs now);

  bool exists(protocol::RecordKind kind, const std::string& key) const;

  RecordMap records_;  // held_in_memory kinds only
  // Records held in the store only as read back (nullopt: the store holds none) or put since, until
  // forget_recalled(). An update keeps a record's seq, so readers that page by seq see it once.
  std::map<std::pair<protocol::RecordKind, std::string>, std::optional<protocol::RecordEntry>> known_;
  std::uint64_t next_seq_ = 1;
  std::shared_ptr<const qualification::RiskRegister> waiver_register_;
};

}  // namespace kiln::coordinator
