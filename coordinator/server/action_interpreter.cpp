#include "coordinator/server/action_interpreter.h"

#include <utility>
#include <variant>

#include <fmt/format.h>

#include "common/exhaustive.h"

namespace kiln::coordinator {

Status carry_out(Action action, CoordinatorCore& core, CoordinatorIo& io) {
  return std::visit(
      Exhaustive{
          [&](action::ToAgent& a) {
            io.send_to_agent(a.peer, std::move(a.body), a.corr);
            return Status{};
          },
          [&](action::ToClient& a) {
            io.send_to_client(a.client, std::move(a.body), a.corr);
            return Status{};
          },
          [&](action::SaveNode& a) { return io.save_node(a.node); },
          [&](action::SaveJob& a) { return io.save_job(a.job); },
          [&](action::SaveRecord& a) { return io.save_record(a.record); },
          [&](action::SaveLease& a) { return io.save_lease(a.lease); },
          [&](action::AppendAudit& a) { return io.append_audit(a.entry); },
          [&](action::RecallJob& a) {
            core.on_job_recalled(a.job_id, io.recall_job(a.job_id));
            return Status{};
          },
          [&](action::ReadRecords& a) {
            core.on_records_read(a, io.read_records(a.query));
            return Status{};
          },
          [&](action::RecallRecord& a) {
            core.on_record_recalled(a.kind, a.key, io.read_records(protocol::GetRecord{a.kind, a.key}));
            return Status{};
          },
          [&](action::Log& a) {
            io.log(a.severity, a.text);
            return Status{};
          },
      },
      action);
}

Status carry_out_actions(CoordinatorCore& core, CoordinatorIo& io) {
  while (auto action = core.poll_action()) {
    if (auto s = carry_out(std::move(*action), core, io); !s) return s;
  }
  return {};
}

Result<protocol::Envelope> admit_message(const ReceivedFrames& frames, const protocol::CodecLimits& limits,
                                         CoordinatorIo& io) {
  auto envelope = protocol::decode(frames.header, frames.body, limits);
  if (envelope) return envelope;
  const Error& error = envelope.error();
  std::uint64_t corr = 0;
  if (auto header = protocol::decode_header(frames.header, limits)) corr = header->id;
  io.log(action::Severity::warn, fmt::format("refused a message from {} ({}): {}", frames.sender,
                                             frames.from_agent ? "agent" : "client", error.message));
  protocol::ErrorReply reply{std::string(to_string(error.code)), error.message, {}};
  if (error.code == Errc::unsupported_version) {
    reply.supported_versions.assign(protocol::kSupportedVersions.begin(), protocol::kSupportedVersions.end());
  }
  if (frames.from_agent) {
    io.send_to_agent(frames.peer, std::move(reply), corr);
  } else {
    io.send_to_client(frames.peer, std::move(reply), corr);
  }
  return envelope;
}

}  // namespace kiln::coordinator
