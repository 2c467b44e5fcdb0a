// The one interpreter of what the coordinator core asks for: its actions, carried out over an
// I/O interface, and the admission of the messages it is fed. kiln-coordinator runs it over
// ZeroMQ and SQLite (server.cpp), the cluster simulation over its simulated network and store,
// and the core's unit tests over memory, so the code that keeps the ordering rules below is the
// code the simulation checks (as FoundationDB runs its real code over a simulated network).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/error.h"
#include "common/protocol/codec.h"
#include "coordinator/core/coordinator_core.h"

namespace kiln::coordinator {

// The world the coordinator's actions act on.
class CoordinatorIo {
 public:
  virtual ~CoordinatorIo() = default;
  // Best effort: a message that cannot go out is logged by the implementation; the protocol's
  // retries (heartbeats, resent results, client timeouts) cover its loss.
  virtual void send_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) = 0;
  virtual void send_to_client(const std::string& client, protocol::Body body, std::uint64_t corr) = 0;
  // Durable when they return success.
  virtual Status save_node(const NodeRecord& node) = 0;
  virtual Status save_job(const JobRecord& job) = 0;
  virtual Status save_record(const protocol::RecordEntry& record) = 0;
  virtual Status save_lease(const LeaseRecord& lease) = 0;
  virtual Status append_audit(const protocol::AuditEntry& entry) = 0;
  // A job as stored (with what was saved before it in this turn), nullopt when there is none.
  virtual Result<std::optional<JobRecord>> recall_job(std::uint64_t job_id) = 0;
  // Qualification records as stored (with what was saved before them in this turn): the one a
  // GetRecord names (none if not stored), or a ListRecords' records of its kind after its
  // after_seq, in seq order, at most its limit.
  virtual Result<std::vector<protocol::RecordEntry>> read_records(
      const std::variant<protocol::GetRecord, protocol::ListRecords>& query) = 0;
  virtual void log(action::Severity severity, const std::string& text) = 0;
};

// Carries out one action; returns a failed save's error. A recalled job and records read go
// back to `core`.
Status carry_out(Action action, CoordinatorCore& core, CoordinatorIo& io);

// Carries out the core's pending actions in order. The first failed save stops it: the actions
// after it, among them the replies that depend on that save, are left undone and its error is
// returned. Nothing more may be acknowledged then, so the caller stops the coordinator.
Status carry_out_actions(CoordinatorCore& core, CoordinatorIo& io);

// A message as it arrived on one of the coordinator's sockets, before decoding.
struct ReceivedFrames {
  std::string peer;  // the connection's routing id: where a refusal goes
  bool from_agent = false;
  std::string_view sender;  // the sender's key name, for the log
  std::string_view header;
  std::string_view body;
};

// Decodes a received message for the core. One that does not decode is refused: an `error`
// reply naming the problem (with the supported versions, for a version the coordinator does
// not speak) goes back to its sender, a warning is logged, and the error is returned so that
// nothing reaches the core.
Result<protocol::Envelope> admit_message(const ReceivedFrames& frames, const protocol::CodecLimits& limits,
                                         CoordinatorIo& io);

}  // namespace kiln::coordinator
