#include "client/records_client.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "records/run_records.h"

namespace kiln::qualification::shell {
namespace {

using protocol::RecordKind;

Status put(cli::Client& client, RecordKind kind, const std::string& key, const nlohmann::json& document) {
  auto reply = cli::expect_reply<protocol::Ok>(client.request(protocol::PutRecord{kind, key, document.dump()}));
  if (!reply) return tl::unexpected(reply.error());
  return {};
}

// Pages through `query` (oldest first after its after_seq, or newest first below its before_seq)
// and hands each record to `take` until it says false or none is left.
Status each_record(cli::Client& client, protocol::ListRecords query,
                   const std::function<Result<bool>(protocol::RecordEntry&&)>& take) {
  for (;;) {
    auto page = cli::expect_reply<protocol::RecordList>(client.request(query));
    if (!page) return tl::unexpected(page.error());
    for (auto& record : page->records) {
      const std::uint64_t seq = record.seq;
      // A coordinator older than newest_first ignores it and lists oldest first.
      if (query.newest_first && query.before_seq != 0 && seq >= query.before_seq) {
        return fail(Errc::unavailable, "the coordinator lists records oldest first only: it is older than this kiln; "
                                       "upgrade it (or use a kiln of its version)");
      }
      auto go_on = take(std::move(record));
      if (!go_on) return tl::unexpected(go_on.error());
      if (!*go_on) return {};
      (query.newest_first ? query.before_seq : query.after_seq) = seq;
    }
    if (!page->more || page->records.empty()) return {};
  }
}

Result<std::vector<protocol::RecordEntry>> all(cli::Client& client, RecordKind kind, std::uint64_t after = 0) {
  std::vector<protocol::RecordEntry> records;
  auto ok = each_record(client, protocol::ListRecords{kind, 10000, after},
                        [&records](protocol::RecordEntry&& record) -> Result<bool> {
                          records.push_back(std::move(record));
                          return true;
                        });
  if (!ok) return tl::unexpected(ok.error());
  return records;
}

Result<nlohmann::json> document_of(const protocol::RecordEntry& record) {
  auto json = nlohmann::json::parse(record.document, nullptr, false);
  if (json.is_discarded()) {
    return fail(Errc::bad_message, fmt::format("the coordinator's {} record {} is not JSON",
                                               protocol::enum_name(record.kind), record.key));
  }
  return json;
}

Result<TicketRecord> ticket_of(const protocol::RecordEntry& record) {
  auto json = document_of(record);
  if (!json) return tl::unexpected(json.error());
  return ticket_record_from_json(*json);
}

// The documents of `kind` first recorded after `after_seq`, oldest first; `after_seq` becomes the
// newest one's.
Result<std::vector<nlohmann::json>> documents_after(cli::Client& client, RecordKind kind, std::uint64_t& after_seq) {
  auto records = all(client, kind, after_seq);
  if (!records) return tl::unexpected(records.error());
  for (const auto& record : *records) after_seq = std::max(after_seq, record.seq);
  std::vector<nlohmann::json> documents;
  for (const auto& record : *records) {
    auto json = document_of(record);
    if (!json) return tl::unexpected(json.error());
    documents.push_back(std::move(*json));
  }
  return documents;
}

// The latest documents of `kind` below `before_seq` (0: none), read newest first until `enough`
// says so of one (not taken); returned oldest first.
// `whole`: what each document is made into before `enough` sees it (a run header, its whole report).
Result<std::vector<nlohmann::json>> latest_documents(
    cli::Client& client, RecordKind kind, const std::function<bool(const nlohmann::json&)>& enough,
    std::uint64_t before_seq = 0,
    const std::function<Result<nlohmann::json>(nlohmann::json)>& whole = [](nlohmann::json document) {
      return Result<nlohmann::json>(std::move(document));
    }) {
  std::vector<nlohmann::json> documents;
  auto ok = each_record(client, protocol::ListRecords{kind, 10000, 0, before_seq, true},
                        [&](protocol::RecordEntry&& record) -> Result<bool> {
                          auto read = document_of(record);
                          if (!read) return tl::unexpected(read.error());
                          auto json = whole(std::move(*read));
                          if (!json) return tl::unexpected(json.error());
                          if (enough(*json)) return false;
                          documents.push_back(std::move(*json));
                          return true;
                        });
  if (!ok) return tl::unexpected(ok.error());
  std::reverse(documents.begin(), documents.end());
  return documents;
}

}  // namespace

Status record_change(cli::Client& client, const Change& change) {
  return put(client, RecordKind::change, change.id, to_json(change));
}

Result<std::vector<Change>> list_changes(cli::Client& client) {
  std::uint64_t after_seq = 0;
  return list_changes_after(client, after_seq);
}

Result<std::vector<Change>> list_changes_after(cli::Client& client, std::uint64_t& after_seq) {
  // Advanced only once every change read is taken: a failed read is read again whole.
  std::uint64_t read_to = after_seq;
  auto documents = documents_after(client, RecordKind::change, read_to);
  if (!documents) return tl::unexpected(documents.error());
  std::vector<Change> changes;
  for (const auto& json : *documents) {
    auto change = change_from_json(json);
    if (!change) return tl::unexpected(change.error());
    changes.push_back(std::move(*change));
  }
  after_seq = read_to;
  return changes;
}

Result<std::vector<Change>> ChangeHistory::read(cli::Client& client) {
  std::lock_guard lock(mutex_);
  auto added = list_changes_after(client, after_seq_);
  if (!added) return tl::unexpected(added.error());
  changes_.insert(changes_.end(), std::make_move_iterator(added->begin()), std::make_move_iterator(added->end()));
  return changes_;
}

Status record_bundle(cli::Client& client, const Bundle& bundle) {
  return put(client, RecordKind::bundle, bundle.id, to_json(bundle));
}

namespace {

Result<std::vector<Bundle>> bundles_of(const std::vector<nlohmann::json>& documents) {
  std::vector<Bundle> bundles;
  for (const auto& json : documents) {
    auto bundle = bundle_from_json(json);
    if (!bundle) return tl::unexpected(bundle.error());
    bundles.push_back(std::move(*bundle));
  }
  return bundles;
}

}  // namespace

Result<std::vector<Bundle>> list_bundles(cli::Client& client) {
  std::uint64_t after_seq = 0;
  auto documents = documents_after(client, RecordKind::bundle, after_seq);
  if (!documents) return tl::unexpected(documents.error());
  return bundles_of(*documents);
}

Result<std::vector<Bundle>> list_latest_bundles(cli::Client& client, std::size_t last, bool& more) {
  std::size_t read = 0;
  more = false;
  const auto enough = [&](const nlohmann::json&) { return more = ++read > last; };
  auto documents = latest_documents(client, RecordKind::bundle, enough);
  if (!documents) return tl::unexpected(documents.error());
  return bundles_of(*documents);
}

Result<Bundle> get_bundle(cli::Client& client, const std::string& id) {
  auto record = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{RecordKind::bundle, id}));
  if (!record) return tl::unexpected(record.error());
  auto json = document_of(*record);
  if (!json) return tl::unexpected(json.error());
  return bundle_from_json(*json);
}

Result<Bundle> find_bundle(cli::Client& client, const std::string& id_or_prefix) {
  // A whole id is read by its key: only a prefix needs the list.
  constexpr std::size_t kIdSize = 64;
  if (id_or_prefix.size() == kIdSize) {
    auto bundle = get_bundle(client, id_or_prefix);
    if (bundle || bundle.error().code != Errc::not_found) return bundle;
  }
  if (id_or_prefix.size() < 6) {
    return fail(Errc::invalid_argument, fmt::format("bundle id '{}' is too short; give at least 6 characters of it "
                                                    "(`kiln bundles` lists them)",
                                                    id_or_prefix));
  }
  // The coordinator lists only the keys with the prefix, and two of them say it is ambiguous. (One
  // older than key_prefix lists every bundle, two a page: the keys are checked here too.)
  std::vector<protocol::RecordEntry> matches;
  protocol::ListRecords query{RecordKind::bundle, 2};
  query.key_prefix = id_or_prefix;
  auto ok = each_record(client, query, [&](protocol::RecordEntry&& record) -> Result<bool> {
    if (record.key.starts_with(id_or_prefix)) matches.push_back(std::move(record));
    return matches.size() < 2;
  });
  if (!ok) return tl::unexpected(ok.error());
  if (matches.empty()) {
    return fail(Errc::not_found, fmt::format("no bundle {}; build one with `kiln bundle build`, `kiln bundles` lists "
                                             "them",
                                             id_or_prefix));
  }
  if (matches.size() > 1) {
    return fail(Errc::invalid_argument, fmt::format("more than one bundle starts with {} ({}..., {}...); give more of the "
                                                    "id",
                                                    id_or_prefix, matches[0].key.substr(0, 16),
                                                    matches[1].key.substr(0, 16)));
  }
  auto json = document_of(matches.front());
  if (!json) return tl::unexpected(json.error());
  return bundle_from_json(*json);
}

Result<std::map<std::string, Baseline>> list_baselines(cli::Client& client) {
  auto records = all(client, RecordKind::baseline);
  if (!records) return tl::unexpected(records.error());
  std::map<std::string, Baseline> baselines;
  for (const auto& record : *records) {
    auto json = document_of(record);
    if (!json) return tl::unexpected(json.error());
    Baseline baseline;
    baseline.revision = record.key;
    baseline.bundle_id = json->value("bundle_id", "");
    baseline.accepted_by_run = json->value("accepted_by_run", "");
    baseline.accepted_at_ms = json->value("accepted_at_ms", TimeMs{0});
    baselines[record.key] = baseline;
  }
  return baselines;
}

Status accept_baseline(cli::Client& client, const Baseline& baseline) {
  return put(client, RecordKind::baseline, baseline.revision,
             {{"bundle_id", baseline.bundle_id},
              {"accepted_by_run", baseline.accepted_by_run},
              {"accepted_at_ms", baseline.accepted_at_ms}});
}

Status record_run(cli::Client& client, const std::string& run_id, const nlohmann::json& report, RecordKind kind) {
  if (kind != RecordKind::qualification_run) return put(client, kind, run_id, report);
  RunRecorder recorder;
  return recorder.record(client, run_id, report);
}

std::uint64_t RunRecorder::next_write() {
  const auto now_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  last_write_ = std::max(now_ms, last_write_ + 1);
  return last_write_;
}

Status RunRecorder::record(cli::Client& client, const std::string& run_id, const nlohmann::json& report) {
  std::lock_guard lock(mutex_);
  const std::uint64_t write = next_write();
  // Compared as JSON, not as text, and without the write's number: most model runs do not change
  // between two records, and comparing is cheaper than writing each out again.
  const auto put_changed = [&](RecordKind kind, const std::string& key, nlohmann::json& document,
                               bool changed_anyway) -> Result<bool> {
    auto& written = written_[std::make_pair(kind, key)];
    if (written == document && !changed_anyway) return false;
    nlohmann::json numbered = document;
    if (numbered.is_object()) numbered[kWriteMember] = write;
    auto reply = cli::expect_reply<protocol::Ok>(client.request(protocol::PutRecord{kind, key, numbered.dump()}));
    if (!reply) return tl::unexpected(reply.error());
    written = std::move(document);
    return true;
  };
  auto records = split_run(report);
  if (!records) {
    nlohmann::json whole = report;
    auto put = put_changed(RecordKind::qualification_run, run_id, whole, false);
    if (!put) return tl::unexpected(put.error());
    return {};
  }
  bool models_put = false;
  for (ModelRunRecord& model : records->models) {
    auto put = put_changed(RecordKind::model_run, model.key, model.document, false);
    if (!put) return tl::unexpected(put.error());
    models_put = models_put || *put;
  }
  auto put = put_changed(RecordKind::qualification_run, run_id, records->header, models_put);
  if (!put) return tl::unexpected(put.error());
  return {};
}

Result<nlohmann::json> whole_run(cli::Client& client, nlohmann::json header) {
  // A header read in the middle of a write finds model runs of that write: the writer puts the
  // header right after them, so it is read again, a little later each time.
  constexpr int kReads = 5;
  for (int read = 1;; ++read) {
    if (!models_stored_apart(header)) return header;
    protocol::ListRecords query{RecordKind::model_run, 10000};
    query.key_prefix = model_run_prefix(header.value("run_id", std::string()));
    std::vector<nlohmann::json> documents;
    auto ok = each_record(client, query, [&documents](protocol::RecordEntry&& record) -> Result<bool> {
      auto json = document_of(record);
      if (!json) return tl::unexpected(json.error());
      documents.push_back(std::move(*json));
      return true;
    });
    if (!ok) return tl::unexpected(ok.error());
    if (read == kReads || !written_after(header, documents)) return assemble_run(std::move(header), documents);
    std::this_thread::sleep_for(std::chrono::milliseconds(10 * read));
    auto again = cli::expect_reply<protocol::RecordEntry>(
        client.request(protocol::GetRecord{RecordKind::qualification_run, header.value("run_id", std::string())}));
    if (!again) return tl::unexpected(again.error());
    auto reread = document_of(*again);
    if (!reread) return reread;
    header = std::move(*reread);
  }
}

Result<nlohmann::json> get_run(cli::Client& client, const std::string& run_id, RecordKind kind) {
  // A header that changed while its model runs were read is read again, with them: whole_run
  // catches a write under way by its number, this also a writer that did not number its writes.
  constexpr int kReads = 5;
  for (int read = 1;; ++read) {
    auto record = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{kind, run_id}));
    if (!record) return tl::unexpected(record.error());
    auto header = document_of(*record);
    if (!header) return header;
    if (!models_stored_apart(*header)) return header;
    auto whole = whole_run(client, std::move(*header));
    if (!whole) return whole;
    auto again = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{kind, run_id}));
    if (!again) return tl::unexpected(again.error());
    if (again->document == record->document || read == kReads) return whole;
  }
}

Result<std::vector<nlohmann::json>> list_runs(cli::Client& client, RecordKind kind) {
  std::uint64_t after_seq = 0;
  return list_runs_after(client, after_seq, kind);
}

Result<std::vector<nlohmann::json>> list_runs_after(cli::Client& client, std::uint64_t& after_seq, RecordKind kind) {
  // Advanced only once every run read is whole: a failed read is read again.
  std::uint64_t read_to = after_seq;
  auto headers = documents_after(client, kind, read_to);
  if (!headers) return headers;
  for (auto& header : *headers) {
    auto whole = whole_run(client, std::move(header));
    if (!whole) return tl::unexpected(whole.error());
    header = std::move(*whole);
  }
  after_seq = read_to;
  return headers;
}

Result<std::vector<nlohmann::json>> list_runs_of_bundle(cli::Client& client, const std::string& bundle_id) {
  auto bundle = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{RecordKind::bundle, bundle_id}));
  if (!bundle) return tl::unexpected(bundle.error());
  std::uint64_t after_seq = bundle->seq;
  auto runs = list_runs_after(client, after_seq);
  if (!runs) return tl::unexpected(runs.error());
  std::erase_if(*runs, [&](const nlohmann::json& report) {
    return report.value("candidate_bundle_id", std::string()) != bundle_id;
  });
  return runs;
}

Result<std::vector<nlohmann::json>> list_latest_runs(cli::Client& client,
                                                     const std::function<bool(const nlohmann::json&)>& enough,
                                                     RecordKind kind, std::uint64_t before_seq) {
  return latest_documents(client, kind, enough, before_seq,
                          [&client](nlohmann::json header) { return whole_run(client, std::move(header)); });
}

Status request_run(cli::Client& client, const RunRequest& request) {
  return put(client, RecordKind::run_request, request.run_id, to_json(request));
}

Result<std::vector<RecordedRequest>> list_run_requests(cli::Client& client, std::uint64_t after_seq) {
  auto records = all(client, RecordKind::run_request, after_seq);
  if (!records) return tl::unexpected(records.error());
  std::vector<RecordedRequest> requests;
  for (const auto& record : *records) {
    auto json = document_of(record);
    if (!json) return tl::unexpected(json.error());
    auto request = run_request_from_json(*json);
    if (!request) return tl::unexpected(request.error());
    requests.push_back({record.seq, std::move(*request), record.updated_at_ms});
  }
  std::sort(requests.begin(), requests.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return requests;
}

Status claim_run(cli::Client& client, const RunClaim& claim) {
  return put(client, RecordKind::run_claim, claim.run_id, to_json(claim));
}

Status cancel_run(cli::Client& client, const std::string& run_id) {
  return put(client, RecordKind::run_cancel, run_id, nlohmann::json{{"run_id", run_id}});
}

Result<std::vector<RunCancel>> list_run_cancels(cli::Client& client, std::uint64_t& after_seq) {
  auto records = all(client, RecordKind::run_cancel, after_seq);
  if (!records) return tl::unexpected(records.error());
  std::vector<RunCancel> cancels;
  for (const auto& record : *records) {
    after_seq = std::max(after_seq, record.seq);
    cancels.push_back({record.key, record.written_by});
  }
  return cancels;
}

Status record_ticket(cli::Client& client, const TicketRecord& record) {
  return put(client, RecordKind::ticket, record.ticket.id, to_json(record));
}

Result<TicketRecord> get_ticket(cli::Client& client, const std::string& id) {
  auto record = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{RecordKind::ticket, id}));
  if (!record) return tl::unexpected(record.error());
  return ticket_of(*record);
}

Result<std::vector<TicketRecord>> list_tickets(cli::Client& client) {
  auto records = all(client, RecordKind::ticket);
  if (!records) return tl::unexpected(records.error());
  std::vector<TicketRecord> tickets;
  for (const auto& record : *records) {
    auto ticket = ticket_of(record);
    if (!ticket) return tl::unexpected(ticket.error());
    tickets.push_back(std::move(*ticket));
  }
  return tickets;
}

Result<TicketRecord> set_ticket_state(cli::Client& client, const protocol::SetTicketState& request) {
  auto record = cli::expect_reply<protocol::RecordEntry>(client.request(request));
  if (!record) return tl::unexpected(record.error());
  return ticket_of(*record);
}

namespace {

// The waiver the coordinator holds under `key`, as it stored it.
Result<Waiver> held_waiver(cli::Client& client, const std::string& key) {
  auto record = cli::expect_reply<protocol::RecordEntry>(client.request(protocol::GetRecord{RecordKind::waiver, key}));
  if (!record && record.error().code == Errc::not_found) {
    return fail(Errc::not_found, fmt::format("no waiver {} is recorded; `kiln waivers` lists those in force with their "
                                             "ids",
                                             key));
  }
  if (!record) return tl::unexpected(record.error());
  auto json = document_of(*record);
  if (!json) return tl::unexpected(json.error());
  return waiver_from_json(*json);
}

}  // namespace

Result<Waiver> record_waiver(cli::Client& client, const Waiver& waiver) {
  const std::string key = waiver_key(waiver);
  if (auto ok = put(client, RecordKind::waiver, key, to_json(waiver)); !ok) return tl::unexpected(ok.error());
  return held_waiver(client, key);
}

Result<std::vector<Waiver>> list_waivers(cli::Client& client) {
  auto records = all(client, RecordKind::waiver);
  if (!records) return tl::unexpected(records.error());
  std::vector<Waiver> waivers;
  for (const auto& record : *records) {
    auto json = document_of(record);
    if (!json) return tl::unexpected(json.error());
    auto waiver = waiver_from_json(*json);
    if (!waiver) return tl::unexpected(waiver.error());
    waivers.push_back(std::move(*waiver));
  }
  return waivers;
}

Result<Waiver> withdraw_waiver(cli::Client& client, const std::string& key) {
  auto held = held_waiver(client, key);
  if (!held) return held;
  auto me = cli::expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
  if (!me) return tl::unexpected(me.error());
  held->withdrawn_by = me->key_name;  // the coordinator writes its own word of who and when
  if (auto ok = put(client, RecordKind::waiver, key, to_json(*held)); !ok) return tl::unexpected(ok.error());
  return held_waiver(client, key);
}

}  // namespace kiln::qualification::shell
