// A ticket as the coordinator keeps it (ticket records, key = the ticket id): the ticket, the run
// it came from, its state (set by people) and, per sink, whether it has been delivered. Pure:
// what a filing of a ticket already held keeps, how a state change is checked, and which
// deliveries are due when, with a bounded backoff. The qualifier's shell does the filing and
// delivering (qualifier/ticket_delivery.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/error.h"
#include "common/protocol/messages_records.h"
#include "common/time.h"
#include "records/ticket.h"

namespace kiln::qualification {

using protocol::TicketState;

// One sink's delivery of one ticket.
struct TicketDelivery {
  bool delivered = false;
  std::uint32_t attempts = 0;     // failed or successful tries so far
  TimeMs next_attempt_at_ms = 0;  // not retried before this (wall clock)
  TimeMs delivered_at_ms = 0;
  std::string last_error;  // why the last try failed
};

struct TicketRecord {
  Ticket ticket;
  std::string run_id;  // the run that filed it
  TicketState state = TicketState::open;
  std::string duplicate_of;  // state duplicate: the ticket it duplicates
  std::string state_set_by;  // the key that set the state last (empty: never set)
  TimeMs state_set_at_ms = 0;
  std::map<std::string, TicketDelivery> sinks;  // by sink name ("directory", "webhook")
};

// A new ticket of `run_id`, open, not yet delivered to any of `sinks`.
TicketRecord new_ticket_record(Ticket ticket, std::string run_id, const std::vector<std::string>& sinks);

// The ticket's JSON (to_json_text(Ticket): schema kiln.ticket/1) plus run_id, state,
// duplicate_of, state_set_by, state_set_at_ms and sinks.
nlohmann::json to_json(const TicketRecord& record);
// The ticket validated (validate(Ticket)), its id the one of its dedupe key.
Result<TicketRecord> ticket_record_from_json(const nlohmann::json& json);

// What a filing of a ticket the coordinator already holds leaves: the first filing's ticket, run
// and state (a qualifier never changes a state); per sink the held delivery once delivered, else
// the one with more attempts; sinks only one side knows are kept.
TicketRecord merge_filing(const TicketRecord& held, const TicketRecord& filed);

// A person's state change: `duplicate_of` names another recorded ticket (found by
// `is_recorded`) for duplicate and must be empty otherwise. Errc::invalid_argument or
// Errc::not_found saying what to give instead.
Result<TicketRecord> with_state(TicketRecord record, TicketState state, const std::string& duplicate_of,
                                bool duplicate_of_recorded, const std::string& by, TimeMs now_ms);

// Retrying a sink that failed: the first retry after first_backoff_ms, each next one after twice
// the wait before, never more than max_backoff_ms apart. A ticket is retried until delivered.
struct DeliveryPolicy {
  DurationMs first_backoff_ms = 5000;
  DurationMs max_backoff_ms = 600000;
};

struct DeliveryDue {
  std::string ticket_id;
  std::string sink;
};

// The undelivered (ticket, sink) pairs whose next attempt is due at `now_ms`, among the sinks
// this qualifier has (`sinks`): a sink it lacks is left to the qualifier that has it.
std::vector<DeliveryDue> deliveries_due(const std::vector<TicketRecord>& records, const std::vector<std::string>& sinks,
                                        TimeMs now_ms);

// The delivery after one attempt at `now_ms`: delivered, or failed with `error` and its next
// attempt set by the policy.
TicketDelivery after_attempt(TicketDelivery delivery, const Status& outcome, TimeMs now_ms,
                             const DeliveryPolicy& policy);

}  // namespace kiln::qualification
