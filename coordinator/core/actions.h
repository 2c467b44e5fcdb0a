// What the coordinator core asks its shell to do, and the one queue every part of the core puts
// those actions on, in the order they must be carried out.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/error.h"
#include "common/text/utf8.h"
#include "common/time.h"
#include "common/protocol/messages.h"
#include "coordinator/core/records.h"

namespace kiln::coordinator {

// Who sent a message, as the shell's authentication established it.
struct Caller {
  std::string key_name;
  protocol::Role role = protocol::Role::developer;
};

namespace action {
struct ToAgent {
  std::string peer;  // the agent connection's routing id
  protocol::Body body;
  std::uint64_t corr = 0;
};
struct ToClient {
  std::string client;  // the client connection's routing id
  protocol::Body body;
  std::uint64_t corr = 0;
};
// Made durable before any later action is carried out: replies that follow a save are only
// sent once the save succeeded.
struct SaveNode {
  NodeRecord node;
};
struct SaveJob {
  JobRecord job;
};
struct SaveRecord {
  protocol::RecordEntry record;
};
// Saved when a developer lease is accepted, granted, changes state or ends.
struct SaveLease {
  LeaseRecord lease;
};
// Appended to the audit log; its seq is the store's.
struct AppendAudit {
  protocol::AuditEntry entry;
};
// Read an ended job the core let go of (job_retention.h) back from the store, and hand it to
// CoordinatorCore::on_job_recalled; the requests that name it wait until then.
struct RecallJob {
  std::uint64_t job_id = 0;
};
// Read qualification records held in the store only (record_book.h) from the store, and hand
// them to CoordinatorCore::on_records_read, which answers the client's request with them.
struct ReadRecords {
  std::string client;
  std::uint64_t corr = 0;
  std::variant<protocol::GetRecord, protocol::ListRecords> query;
};
// Read back a record a put decides by (RecordBook::records_needed) and hand it, or the word that
// the store holds none, to CoordinatorCore::on_record_recalled; the puts that need it wait until then.
struct RecallRecord {
  protocol::RecordKind kind = protocol::RecordKind::change;
  std::string key;
};
enum class Severity { debug, info, warn, error };
struct Log {
  Severity severity = Severity::info;
  std::string text;
};
}  // namespace action

using Action = std::variant<action::ToAgent, action::ToClient, action::SaveNode, action::SaveJob,
                            action::SaveRecord, action::SaveLease, action::AppendAudit, action::RecallJob,
                            action::ReadRecords, action::RecallRecord, action::Log>;

class ActionSink {
 public:
  void push(Action action) { actions_.push_back(std::move(action)); }
  void to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr = 0) {
    push(action::ToAgent{peer, std::move(body), corr});
  }
  void to_client(const std::string& client, protocol::Body body, std::uint64_t corr) {
    push(action::ToClient{client, std::move(body), corr});
  }
  void reply_error(const std::string& client, std::uint64_t corr, Errc code, std::string message) {
    to_client(client, protocol::ErrorReply{std::string(to_string(code)), std::move(message), {}}, corr);
  }
  void log(action::Severity severity, std::string text) { push(action::Log{severity, std::move(text)}); }
  void save(const JobRecord& job) { push(action::SaveJob{job}); }
  void save(const NodeRecord& node) { push(action::SaveNode{node}); }
  void save(const LeaseRecord& lease) { push(action::SaveLease{lease}); }
  // `actor`, `role`: a caller's key and role, or "coordinator" for its own decisions.
  void audit(TimeMs at_wall_ms, std::string actor, std::string role, std::string action, std::string subject,
             std::string detail) {
    // Within the protocol's bounds: a detail quoting a long reason is cut, never refused.
    push(action::AppendAudit{protocol::AuditEntry{0, at_wall_ms, std::move(actor), std::move(role), std::move(action),
                                                  text::utf8_head(subject, 256),
                                                  text::utf8_head(detail, protocol::kMessageText.max_len)}});
  }

  std::optional<Action> poll() {
    if (actions_.empty()) return std::nullopt;
    Action a = std::move(actions_.front());
    actions_.pop_front();
    return a;
  }

 private:
  std::deque<Action> actions_;
};

}  // namespace kiln::coordinator
