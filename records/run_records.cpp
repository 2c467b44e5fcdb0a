#include "records/run_records.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/protocol/messages_records.h"

namespace kiln::qualification {

using json = nlohmann::json;

namespace {

std::string string_member(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The summary's first lines within kHeaderSummaryBytes, and a line saying how many were left out.
std::string bounded_summary(const std::string& summary, const std::string& run_id) {
  if (summary.size() <= kHeaderSummaryBytes) return summary;
  const std::size_t room = kHeaderSummaryBytes - 256;  // for the line that says what was left out
  const std::size_t cut = summary.rfind('\n', room);
  const std::size_t kept = cut == std::string::npos ? 0 : cut + 1;
  const auto left_out = static_cast<std::size_t>(std::count(summary.begin() + static_cast<std::ptrdiff_t>(kept),
                                                            summary.end(), '\n')) +
                        (summary.back() == '\n' ? 0 : 1);
  return summary.substr(0, kept) +
         fmt::format("  ... and {} more lines, left out of the summary for its size: `kiln run {} --json` has every "
                     "model run\n",
                     left_out, run_id);
}

}  // namespace

std::string model_run_prefix(const std::string& run_id) { return run_id + "/"; }

std::optional<RunRecords> split_run(const json& report) {
  const std::string run_id = string_member(report, "run_id");
  const auto models = report.find("models");
  if (run_id.empty() || models == report.end() || !models->is_array()) return std::nullopt;
  const std::size_t longest_key = protocol::kRecordKey.max_len;
  RunRecords records;
  records.header = report;
  records.header.erase("models");
  records.header["model_runs"] = models->size();
  if (auto summary = report.find("summary"); summary != report.end() && summary->is_string()) {
    records.header["summary"] = bounded_summary(summary->get<std::string>(), run_id);
  }
  std::set<std::string> keys;
  for (std::size_t position = 0; position < models->size(); ++position) {
    const json& entry = (*models)[position];
    std::string key = fmt::format("{}{}@{}", model_run_prefix(run_id), string_member(entry, "model"),
                                  string_member(entry, "revision"));
    // A release lists a model again for each soak round: the model runs after its first are told
    // apart by their position, which never changes (a report's model runs are only added to).
    if (keys.count(key) != 0) key += fmt::format("#{}", position);
    if (key.size() > longest_key) key = fmt::format("{}#{}", model_run_prefix(run_id), position);
    if (key.size() > longest_key) return std::nullopt;
    keys.insert(key);
    records.models.push_back(
        {std::move(key),
         {{"schema", kModelRunSchema}, {"run_id", run_id}, {"position", position}, {"entry", entry}}});
  }
  return records;
}

bool models_stored_apart(const json& header) {
  return header.is_object() && !header.contains("models") && header.contains("model_runs");
}

namespace {

std::uint64_t write_of(const json& document) {
  const auto write = document.find(kWriteMember);
  if (write == document.end() || !write->is_number_integer() || write->get<std::int64_t>() < 0) return 0;
  return write->get<std::uint64_t>();
}

}  // namespace

bool written_after(const json& header, const std::vector<json>& documents) {
  const std::uint64_t header_write = write_of(header);
  return std::any_of(documents.begin(), documents.end(), [&](const json& document) {
    return document.is_object() && write_of(document) > header_write;
  });
}

Result<json> assemble_run(json header, const std::vector<json>& documents) {
  const std::string run_id = string_member(header, "run_id");
  const auto count = header.value("model_runs", std::size_t{0});
  std::map<std::size_t, const json*> at_position;
  for (const json& document : documents) {
    if (!document.is_object() || string_member(document, "run_id") != run_id) continue;
    const auto position = document.find("position");
    if (position == document.end() || !position->is_number_unsigned() || !document.contains("entry")) continue;
    at_position[position->get<std::size_t>()] = &document.at("entry");
  }
  json models = json::array();
  for (std::size_t position = 0; position < count; ++position) {
    auto it = at_position.find(position);
    if (it == at_position.end()) {
      return fail(Errc::bad_message,
                  fmt::format("run {} counts {} model runs but model run {} is not recorded; the qualifier writes a "
                              "run's model runs before its header, so its store lost one: restore the coordinator's "
                              "store, or run the qualification again",
                              run_id, count, position));
    }
    models.push_back(*it->second);
  }
  header.erase("model_runs");
  header.erase(kWriteMember);
  header["models"] = std::move(models);
  return header;
}

}  // namespace kiln::qualification
