// Protocol v1 messages. docs/protocol.md is the normative description; the field names,
// bounds and requiredness below are the same ones it lists. A message's body is a msgpack
// map keyed by these field names; `visit` is the single source of truth for both encoding
// and validation.
//
// The messages live in one header per peer (messages_agent.h, messages_client.h,
// messages_records.h) over the shared vocabulary (messages_types.h); this header gathers them
// into the one Body the codec and the cores dispatch on.
#pragma once

#include <string_view>
#include <variant>

#include "common/protocol/messages_agent.h"
#include "common/protocol/messages_client.h"
#include "common/protocol/messages_records.h"
#include "common/protocol/messages_types.h"

namespace kiln::protocol {

using Body = std::variant<Hello, Welcome, Heartbeat, JobStart, JobStarted, JobFinished,
                          JobFinishedAck, JobCancel, JobPreempt, HealthReport, Whoami, WhoamiReply, SubmitJob, JobAccepted,
                          ListNodes, NodeList, ListJobs, JobList, GetJob, JobDetail, CancelJob,
                          DrainNode, Ok, ErrorReply, RequestLease, LeaseGranted, LeasePending,
                          ReleaseLease, ListLeases, LeaseList, WatchLease, LeaseEvent, SubmitInLease,
                          QueueWhy, QueueExplanation, PutRecord, GetRecord, ListRecords, RecordEntry, RecordList,
                          QuarantineNode, ListQueue, QueueList, SetTicketState, SubmitGang, GangAccepted,
                          PutArtifact, ArtifactProgress, GetArtifact, ArtifactChunk, ListEnvironments,
                          EnvironmentList, PutAudit, ListAudit, AuditList, GetRiskRegister,
                          RiskRegisterText, RecheckNode, WatchJobs, JobEvents>;

std::string_view type_name(const Body& body);

}  // namespace kiln::protocol
