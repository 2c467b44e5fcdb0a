// The coordinator's qualification records (changes, bundles, accepted baselines, run reports,
// run requests and the qualifiers' claims on them):
// validated on the way in, kept in memory, saved through the core's actions. Pure.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/protocol/messages.h"
#include "common/time.h"

namespace kiln::qualification {
struct RiskRegister;
}

namespace kiln::coordinator {

class RecordBook {
 public:
  // `waiver_register`: the register whose teams' approvers may waive their gates (coordinator.toml
  // risk_register); without one every waiver is refused.
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
  const protocol::RecordEntry* get(protocol::RecordKind kind, const std::string& key) const;
  protocol::RecordList list(const protocol::ListRecords& request) const;

 private:
  Status check(const protocol::PutRecord& put) const;
  Result<std::string> claim_document(const protocol::PutRecord& put, TimeMs now) const;
  Result<std::string> waiver_document(const protocol::PutRecord& put, const std::string& written_by, TimeMs now) const;
  protocol::RecordEntry store(protocol::RecordKind kind, const std::string& key, std::string document,
                              const std::string& written_by, TimeMs now);

  std::map<std::pair<protocol::RecordKind, std::string>, protocol::RecordEntry> records_;
  std::uint64_t next_seq_ = 1;
  std::shared_ptr<const qualification::RiskRegister> waiver_register_;
};

}  // namespace kiln::coordinator
