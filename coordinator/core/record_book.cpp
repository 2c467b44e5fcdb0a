#include "coordinator/core/record_book.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "records/change.h"
#include "records/run_request.h"
#include "records/ticket_record.h"
#include "records/waiver.h"

namespace kiln::coordinator {

using protocol::RecordKind;

namespace {

Result<nlohmann::json> parse_object(const std::string& document, RecordKind kind) {
  auto json = nlohmann::json::parse(document, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return fail(Errc::bad_message, fmt::format("the {} record is not a JSON object; send the document kiln wrote",
                                               protocol::enum_name(kind)));
  }
  return json;
}

// A string member of a peer's document, or "" when it is missing or not a string (json::value
// would throw on a member of another type).
std::string string_member(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Status key_matches(const std::string& key, const std::string& id, RecordKind kind) {
  if (key == id) return {};
  return fail(Errc::invalid_argument, fmt::format("a {} record's key must be its id: key '{}', id '{}'",
                                                  protocol::enum_name(kind), key, id));
}

}  // namespace

std::vector<protocol::RecordEntry> records_in(const RecordMap& records, const protocol::ListRecords& range,
                                              std::size_t limit) {
  std::vector<protocol::RecordEntry> rows;
  const auto kind = range.kind;
  // Keys are in order within a kind, so the keys with a prefix are one run from its lower bound.
  for (auto it = records.lower_bound(std::make_pair(kind, range.key_prefix));
       it != records.end() && it->first.first == kind && it->first.second.starts_with(range.key_prefix); ++it) {
    const std::uint64_t seq = it->second.seq;
    if (seq > range.after_seq && (range.before_seq == 0 || seq < range.before_seq)) rows.push_back(it->second);
  }
  std::sort(rows.begin(), rows.end(),
            [&](const auto& a, const auto& b) { return range.newest_first ? a.seq > b.seq : a.seq < b.seq; });
  if (rows.size() > limit) rows.resize(limit);
  return rows;
}

std::vector<protocol::RecordEntry> read_from(const RecordMap& records,
                                             const std::variant<protocol::GetRecord, protocol::ListRecords>& query) {
  if (const auto* get = std::get_if<protocol::GetRecord>(&query)) {
    auto it = records.find(std::make_pair(get->kind, get->key));
    if (it == records.end()) return {};
    return {it->second};
  }
  const auto& list = std::get<protocol::ListRecords>(query);
  return records_in(records, list, list.limit);
}

protocol::RecordList page_of(const protocol::ListRecords& request, std::vector<protocol::RecordEntry> rows,
                             bool rows_read_were_cut) {
  protocol::RecordList list;
  list.more = rows_read_were_cut;
  std::size_t bytes = 0;
  for (auto& record : rows) {
    const bool over_bytes = bytes + record.document.size() > protocol::kRecordListBytes && !list.records.empty();
    if (list.records.size() >= request.limit || over_bytes) {
      list.more = true;
      break;
    }
    bytes += record.document.size();
    list.records.push_back(std::move(record));
  }
  return list;
}

RecordBook::RecordBook(std::vector<protocol::RecordEntry> recovered,
                       std::shared_ptr<const qualification::RiskRegister> waiver_register)
    : waiver_register_(std::move(waiver_register)) {
  for (auto& record : recovered) {
    next_seq_ = std::max(next_seq_, record.seq + 1);
    if (held_in_store_only(record.kind)) continue;
    auto key = std::make_pair(record.kind, record.key);
    records_.emplace(std::move(key), std::move(record));
  }
}

Status RecordBook::check(const protocol::PutRecord& put) const {
  auto json = parse_object(put.document, put.kind);
  if (!json) return tl::unexpected(json.error());
  switch (put.kind) {
    case RecordKind::change: {
      auto change = qualification::change_from_json(*json);
      if (!change) return tl::unexpected(change.error());
      return key_matches(put.key, change->id, put.kind);
    }
    case RecordKind::bundle: {
      auto bundle = qualification::bundle_from_json(*json);
      if (!bundle) return tl::unexpected(bundle.error());
      if (auto ok = key_matches(put.key, bundle->id, put.kind); !ok) return ok;
      if (bundle->listed_change_ids) {
        return fail(Errc::bad_message, fmt::format("bundle {} is a kiln.bundle/1 record, which lists every change and "
                                                   "outgrows a record as the history grows; those recorded before are "
                                                   "read, new ones are not taken: build it with this kiln (kiln bundle "
                                                   "build)",
                                                   bundle->id));
      }
      // A bundle names the last change of its history prefix; the changes before it were recorded
      // first (the history only grows).
      if (bundle->change_count > 0 && !exists(RecordKind::change, bundle->last_change)) {
        return fail(Errc::not_found, fmt::format("bundle {} contains change {}, which is not recorded; record the "
                                                 "changes (kiln change add / import) before their bundles",
                                                 bundle->id, bundle->last_change));
      }
      return {};
    }
    case RecordKind::baseline: {
      const std::string bundle_id = string_member(*json, "bundle_id");
      const protocol::RecordEntry* bundle = get(RecordKind::bundle, bundle_id);
      if (bundle == nullptr) {
        return fail(Errc::not_found, fmt::format("baseline for revision {} names bundle '{}', which is not recorded; "
                                                 "`kiln bundles` lists the bundles",
                                                 put.key, bundle_id));
      }
      const auto revisions = nlohmann::json::parse(bundle->document).value("hardware_revisions",
                                                                           std::vector<std::string>{});
      if (std::find(revisions.begin(), revisions.end(), put.key) == revisions.end()) {
        return fail(Errc::invalid_argument, fmt::format("bundle {} does not support revision {}; accept it only on "
                                                        "its revisions",
                                                        bundle_id, put.key));
      }
      return {};
    }
    case RecordKind::qualification_run:
      return key_matches(put.key, string_member(*json, "run_id"), put.kind);
    case RecordKind::model_run: {
      // The coordinator keeps the report's format out: a model run names its run, and its key is
      // under that run's, so a run's model runs are listed by the prefix "<run id>/".
      const std::string run_id = string_member(*json, "run_id");
      if (run_id.empty() || !put.key.starts_with(run_id + "/") || put.key.size() == run_id.size() + 1) {
        return fail(Errc::invalid_argument, fmt::format("a model_run record's key must be its run_id, '/' and the "
                                                        "model run: key '{}', run_id '{}'",
                                                        put.key, run_id));
      }
      return {};
    }
    case RecordKind::stability_run:
      if (json->value("schema", std::string()) != "kiln.stability-run/1" || !json->contains("models")) {
        return fail(Errc::bad_message, "a stability_run record needs schema kiln.stability-run/1 and its models; send "
                                       "the document kiln stability writes");
      }
      return key_matches(put.key, string_member(*json, "run_id"), put.kind);
    case RecordKind::run_request: {
      auto request = qualification::run_request_from_json(*json);
      if (!request) return tl::unexpected(request.error());
      if (auto ok = key_matches(put.key, request->run_id, put.kind); !ok) return ok;
      if (!exists(RecordKind::bundle, request->bundle_id)) {
        return fail(Errc::not_found, fmt::format("run {} asks for bundle '{}', which is not recorded; `kiln bundles` "
                                                 "lists the bundles",
                                                 request->run_id, request->bundle_id));
      }
      return {};
    }
    case RecordKind::run_claim: {
      auto claim = qualification::run_claim_from_json(*json);
      if (!claim) return tl::unexpected(claim.error());
      if (auto ok = key_matches(put.key, claim->run_id, put.kind); !ok) return ok;
      if (!exists(RecordKind::run_request, put.key)) {
        return fail(Errc::not_found, fmt::format("no run {} was requested; a qualifier claims only requested runs",
                                                 put.key));
      }
      return {};
    }
    case RecordKind::run_cancel: {
      if (auto ok = key_matches(put.key, string_member(*json, "run_id"), put.kind); !ok) return ok;
      if (!exists(RecordKind::run_request, put.key)) {
        return fail(Errc::not_found, fmt::format("no run {} was requested; `kiln runs` lists the runs", put.key));
      }
      return {};
    }
    case RecordKind::ticket: {
      auto ticket = qualification::ticket_record_from_json(*json);
      if (!ticket) return tl::unexpected(ticket.error());
      return key_matches(put.key, ticket->ticket.id, put.kind);
    }
    case RecordKind::promotion: {
      // Written by `kiln release` after the commit that changed the environment (docs/releases.md).
      const std::string environment = string_member(*json, "environment");
      const std::string commit = string_member(*json, "commit");
      if (json->value("schema", std::string()) != "kiln.promotion/1" || environment.empty() || commit.empty()) {
        return fail(Errc::bad_message, "a promotion record needs schema kiln.promotion/1, environment and commit");
      }
      return key_matches(put.key, environment + "@" + commit, put.kind);
    }
    case RecordKind::waiver: {
      auto waiver = qualification::waiver_from_json(*json);
      if (!waiver) return tl::unexpected(waiver.error());
      return key_matches(put.key, qualification::waiver_key(*waiver), put.kind);
    }
  }
  return {};
}

// A claim stands until its expiry on this clock: another owner's claim is refused until then.
// The stored claim carries the expiry, so every reader sees the same deadline.
Result<std::string> RecordBook::claim_document(const protocol::PutRecord& put, TimeMs now) const {
  auto claim = qualification::run_claim_from_json(nlohmann::json::parse(put.document));
  KILN_ASSERT(claim.has_value(), "check() accepted the claim");
  if (const protocol::RecordEntry* held = get(RecordKind::run_claim, put.key)) {
    auto holder = qualification::run_claim_from_json(nlohmann::json::parse(held->document));
    if (holder && holder->owner != claim->owner && holder->expires_at_ms > now) {
      return fail(Errc::conflict, fmt::format("run {} is driven by {} for another {} ms; a claim is taken over only "
                                              "once it expires",
                                              put.key, holder->owner, holder->expires_at_ms - now));
    }
  }
  claim->expires_at_ms = std::max<TimeMs>(now, 0) + claim->lease_ms;
  return qualification::to_json(*claim).dump();
}

// A waiver names its approver, team and time as the coordinator saw them, not as the client said:
// the key that wrote it, the team of the register that owns the gate and lists that key among its
// approvers, and now. A client that skips its own check of the register gets no further. Its
// expiry is checked against this clock. A document naming who withdrew it withdraws the waiver
// held under its key instead (withdrawal_document).
Result<std::string> RecordBook::waiver_document(const protocol::PutRecord& put, const std::string& written_by,
                                                bool written_by_admin, TimeMs now) const {
  auto waiver = qualification::waiver_from_json(nlohmann::json::parse(put.document));
  KILN_ASSERT(waiver.has_value(), "check() accepted the waiver");
  if (!waiver->withdrawn_by.empty()) return withdrawal_document(put.key, written_by, written_by_admin, now);
  if (!waiver_register_) {
    return fail(Errc::unauthorized, "this coordinator has no risk register to check the approver against, so it takes "
                                    "no waiver; set [coordinator] risk_register in coordinator.toml to the register "
                                    "the qualifier uses and restart it (docs/operations.md, \"Waivers\")");
  }
  auto team = qualification::waiving_team(*waiver_register_, waiver->scope, waiver->model, waiver->metric, written_by);
  if (!team) return tl::unexpected(team.error());
  waiver->team = std::move(*team);
  waiver->approver = written_by;
  waiver->created_at_ms = std::max<TimeMs>(now, 0);
  if (auto ok = qualification::validate_new_waiver(*waiver, now); !ok) return tl::unexpected(ok.error());
  return qualification::to_json(*waiver).dump();
}

// A withdrawal is a person's act on the waiver in force under `key`: an approver of the team that
// waived it, or an admin. The held waiver is kept, marked with who withdrew it and now.
Result<std::string> RecordBook::withdrawal_document(const std::string& key, const std::string& written_by,
                                                    bool written_by_admin, TimeMs now) const {
  const protocol::RecordEntry* held = get(RecordKind::waiver, key);
  if (held == nullptr) {
    return fail(Errc::not_found, fmt::format("no waiver {} is recorded; `kiln waivers` lists those in force with their "
                                             "ids",
                                             key));
  }
  auto waiver = qualification::waiver_from_json(nlohmann::json::parse(held->document));
  KILN_ASSERT(waiver.has_value(), "the record book stores checked waivers");
  if (!waiver->withdrawn_by.empty()) {
    return fail(Errc::conflict, fmt::format("waiver {} was already withdrawn by {}; nothing lets the gate through", key,
                                            waiver->withdrawn_by));
  }
  if (now >= waiver->expires_at_ms) {
    return fail(Errc::conflict, fmt::format("waiver {} has expired; it lets nothing through already", key));
  }
  if (!written_by_admin) {
    const qualification::RiskTeam* team = waiver_register_ ? waiver_register_->team(waiver->team) : nullptr;
    if (team == nullptr ||
        std::find(team->approvers.begin(), team->approvers.end(), written_by) == team->approvers.end()) {
      return fail(Errc::unauthorized,
                  fmt::format("{} is not an approver of team {}, which waived {}; one of its approvers ({}) or an "
                              "admin withdraws it",
                              written_by, waiver->team, key,
                              team != nullptr ? fmt::format("{}", fmt::join(team->approvers, ", ")) : "none listed"));
    }
  }
  waiver->withdrawn_by = written_by;
  waiver->withdrawn_at_ms = std::max<TimeMs>(now, 0);
  return qualification::to_json(*waiver).dump();
}

Result<protocol::RecordEntry> RecordBook::put(const protocol::PutRecord& put, const std::string& written_by,
                                              bool written_by_admin, TimeMs now) {
  if (auto ok = check(put); !ok) return tl::unexpected(ok.error());
  const protocol::RecordEntry* held = get(put.kind, put.key);
  const bool immutable = put.kind == RecordKind::change || put.kind == RecordKind::bundle ||
                         put.kind == RecordKind::run_request || put.kind == RecordKind::promotion ||
                         put.kind == RecordKind::run_cancel;
  if (held != nullptr && immutable) {
    if (nlohmann::json::parse(held->document) != nlohmann::json::parse(put.document)) {
      return fail(Errc::conflict, fmt::format("{} {} is already recorded with other content; {} records never "
                                              "change: use a new id",
                                              protocol::enum_name(put.kind), put.key, protocol::enum_name(put.kind)));
    }
    return *held;
  }
  std::string document = put.document;
  if (put.kind == RecordKind::run_claim) {
    auto claim = claim_document(put, now);
    if (!claim) return tl::unexpected(claim.error());
    document = std::move(*claim);
  }
  if (put.kind == RecordKind::waiver) {
    auto waiver = waiver_document(put, written_by, written_by_admin, now);
    if (!waiver) return tl::unexpected(waiver.error());
    document = std::move(*waiver);
  }
  if (put.kind == RecordKind::ticket && held != nullptr) {
    // Both documents passed check(): the held one when it was stored.
    const auto ticket = qualification::ticket_record_from_json(nlohmann::json::parse(held->document));
    const auto filed = qualification::ticket_record_from_json(nlohmann::json::parse(put.document));
    KILN_ASSERT(ticket && filed, "stored and checked tickets parse");
    document = qualification::to_json(qualification::merge_filing(*ticket, *filed)).dump();
  }
  return store(put.kind, put.key, std::move(document), written_by, now);
}

protocol::RecordEntry RecordBook::store(RecordKind kind, const std::string& key, std::string document,
                                        const std::string& written_by, TimeMs now) {
  protocol::RecordEntry record;
  record.kind = kind;
  record.key = key;
  record.document = std::move(document);
  record.updated_at_ms = std::max<TimeMs>(now, 0);
  record.written_by = written_by;
  if (held_in_store_only(kind)) {
    auto known = known_.find(std::make_pair(kind, key));
    KILN_ASSERT(known != known_.end(), "a record held in the store only is read back before it is put");
    record.seq = known->second ? known->second->seq : next_seq_++;
    // Known as put for the puts after it until the core forgets: a read back may precede this write.
    known->second = record;
    return record;
  }
  auto it = records_.find(std::make_pair(kind, key));
  record.seq = it != records_.end() ? it->second.seq : next_seq_++;
  records_[std::make_pair(kind, key)] = record;
  return record;
}

Result<protocol::RecordEntry> RecordBook::set_ticket_state(const protocol::SetTicketState& request,
                                                           const std::string& written_by, TimeMs now) {
  const protocol::RecordEntry* held = get(RecordKind::ticket, request.id);
  if (held == nullptr) {
    return fail(Errc::not_found, fmt::format("no ticket '{}'; `kiln tickets` lists the tickets", request.id));
  }
  auto ticket = qualification::ticket_record_from_json(nlohmann::json::parse(held->document));
  KILN_ASSERT(ticket.has_value(), "a stored ticket parses");
  const bool duplicate_of_recorded = get(RecordKind::ticket, request.duplicate_of) != nullptr;
  auto changed = qualification::with_state(std::move(*ticket), request.state, request.duplicate_of,
                                           duplicate_of_recorded, written_by, now);
  if (!changed) return tl::unexpected(changed.error());
  return store(RecordKind::ticket, request.id, qualification::to_json(*changed).dump(), written_by, now);
}

const protocol::RecordEntry* RecordBook::get(RecordKind kind, const std::string& key) const {
  const auto wanted = std::make_pair(kind, key);
  if (held_in_store_only(kind)) {
    auto it = known_.find(wanted);
    return it == known_.end() || !it->second ? nullptr : &*it->second;
  }
  auto it = records_.find(wanted);
  return it == records_.end() ? nullptr : &it->second;
}

bool RecordBook::exists(RecordKind kind, const std::string& key) const { return get(kind, key) != nullptr; }

std::vector<std::pair<RecordKind, std::string>> RecordBook::records_needed(const protocol::PutRecord& put) const {
  std::vector<std::pair<RecordKind, std::string>> needed;
  if (held_in_store_only(put.kind)) needed.emplace_back(put.kind, put.key);
  if (put.kind == RecordKind::run_claim || put.kind == RecordKind::run_cancel) {
    needed.emplace_back(RecordKind::run_request, put.key);
  }
  // The records check() looks for that the document names; only those kinds' documents are read
  // here (a report's tens of KB are parsed once, by check()). A document that does not parse, or
  // names none, needs none: check() refuses it.
  const bool names_a_record =
      put.kind == RecordKind::bundle || put.kind == RecordKind::baseline || put.kind == RecordKind::run_request;
  if (names_a_record) {
    const auto json = nlohmann::json::parse(put.document, nullptr, false);
    if (json.is_object()) {
      const bool bundle = put.kind == RecordKind::bundle;
      needed.emplace_back(bundle ? RecordKind::change : RecordKind::bundle,
                          string_member(json, bundle ? "last_change" : "bundle_id"));
    }
  }
  std::erase_if(needed, [&](const auto& record) { return record.second.empty() || known_.count(record) != 0; });
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  return needed;
}

void RecordBook::take_recalled(protocol::RecordEntry record) {
  KILN_ASSERT(held_in_store_only(record.kind), "only records held in the store only are read back");
  auto key = std::make_pair(record.kind, record.key);
  next_seq_ = std::max(next_seq_, record.seq + 1);
  known_.try_emplace(std::move(key), std::move(record));
}

void RecordBook::take_absent(RecordKind kind, const std::string& key) {
  KILN_ASSERT(held_in_store_only(kind), "only records held in the store only are read back");
  known_.try_emplace(std::make_pair(kind, key), std::nullopt);
}

void RecordBook::forget_recalled() { known_.clear(); }

protocol::RecordList RecordBook::list(const protocol::ListRecords& request) const {
  KILN_ASSERT(held_in_memory(request.kind), "records held in the store only are listed from the store");
  return page_of(request, records_in(records_, request, request.limit + std::size_t{1}),
                 false);
}

}  // namespace kiln::coordinator
