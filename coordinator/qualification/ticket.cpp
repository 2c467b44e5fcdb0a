#include "coordinator/qualification/ticket.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

std::string_view to_string(FileResult result) { return result == FileResult::filed ? "filed" : "duplicate"; }

std::string dedupe_key(TicketKind kind, std::string_view culprit) {
  return fmt::format("{}:{}", to_string(kind), culprit);
}

std::string dedupe_key(const Ticket& ticket) { return dedupe_key(ticket.kind, ticket.culprit_change); }

std::string ticket_id(TicketKind kind, std::string_view culprit) {
  return "kiln-" + sha256_hex(dedupe_key(kind, culprit)).substr(0, 16);
}

Ticket make_ticket(TicketKind kind, std::string team, std::string title, std::string culprit_change,
                   std::optional<Layer> layer, std::string evidence_json, TimeMs created_at_ms) {
  Ticket ticket{"", kind, std::move(team), std::move(title), std::move(culprit_change), layer, std::move(evidence_json),
                created_at_ms, ""};
  ticket.id = ticket_id(ticket.kind, ticket.culprit_change);
  return ticket;
}

Ticket make_culprit_ticket(const Change& culprit, TicketKind kind, std::string title, std::string evidence_json,
                           TimeMs created_at_ms) {
  return make_ticket(kind, culprit.owner_team, std::move(title), culprit.id, culprit.layer, std::move(evidence_json),
                     created_at_ms);
}

namespace {

Result<nlohmann::json> parse_object(std::string_view text, std::string_view what) {
  try {
    nlohmann::json json = nlohmann::json::parse(text);
    if (!json.is_object()) return fail(Errc::bad_message, fmt::format("{} must be a JSON object", what));
    return json;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("{} is not valid JSON ({})", what, error.what()));
  }
}

nlohmann::json to_json(const Ticket& ticket) {
  auto evidence = parse_object(ticket.evidence_json, "evidence");
  nlohmann::json json = {{"schema", "kiln.ticket/1"},
          {"id", ticket.id},
          {"kind", to_string(ticket.kind)},
          {"team", ticket.team},
          {"title", ticket.title},
          {"culprit", ticket.culprit_change},
          {"layer", ticket.layer ? nlohmann::json(to_string(*ticket.layer)) : nlohmann::json(nullptr)},
          {"dedupe_key", dedupe_key(ticket)},
          {"evidence", evidence ? *evidence : nlohmann::json::object()},
          {"created_at_ms", ticket.created_at_ms}};
  if (!ticket.severity.empty()) json["severity"] = ticket.severity;
  return json;
}

}  // namespace

Status validate(const Ticket& ticket) {
  if (ticket.id.empty() || ticket.team.empty() || ticket.title.empty() || ticket.culprit_change.empty()) {
    return fail(Errc::invalid_argument, fmt::format("ticket '{}' needs an id, a team, a title and a culprit; build it "
                                                    "with make_ticket",
                                                    ticket.title));
  }
  if (auto evidence = parse_object(ticket.evidence_json, fmt::format("the evidence of ticket {}", ticket.id)); !evidence) {
    return tl::unexpected(evidence.error());
  }
  return {};
}

std::string to_json_text(const Ticket& ticket) { return to_json(ticket).dump(2) + "\n"; }

Result<Ticket> ticket_from_json_text(std::string_view text, std::string_view source) {
  auto json = parse_object(text, source);
  if (!json) return tl::unexpected(json.error());
  try {
    if (json->value("schema", "") != "kiln.ticket/1") {
      return fail(Errc::bad_message, fmt::format("{}: not a kiln ticket (schema kiln.ticket/1)", source));
    }
    Ticket ticket;
    ticket.id = json->at("id").get<std::string>();
    const auto kind = ticket_kind_from_string(json->at("kind").get<std::string>());
    if (!kind) return fail(Errc::bad_message, fmt::format("{}: unknown ticket kind", source));
    ticket.kind = *kind;
    ticket.team = json->at("team").get<std::string>();
    ticket.title = json->at("title").get<std::string>();
    ticket.culprit_change = json->at("culprit").get<std::string>();
    if (const auto& layer = json->at("layer"); !layer.is_null()) {
      ticket.layer = layer_from_string(layer.get<std::string>());
      if (!ticket.layer) return fail(Errc::bad_message, fmt::format("{}: unknown layer", source));
    }
    ticket.evidence_json = json->at("evidence").dump();
    ticket.created_at_ms = json->at("created_at_ms").get<TimeMs>();
    ticket.severity = json->value("severity", "");
    return ticket;
  } catch (const nlohmann::json::exception& error) {
    return fail(Errc::bad_message, fmt::format("{}: malformed ticket ({})", source, error.what()));
  }
}

Result<DirectoryTicketSink> DirectoryTicketSink::open(std::filesystem::path directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory)) {
    return fail(Errc::io, fmt::format("cannot create the ticket directory {} ({}); check the path and permissions",
                                      directory.string(), error ? error.message() : "not a directory"));
  }
  return DirectoryTicketSink(std::move(directory));
}

std::filesystem::path DirectoryTicketSink::path_for(const Ticket& ticket) const {
  // Named from the dedupe key, not the id, so the key alone decides what a duplicate is.
  return directory_ / ("ticket-" + sha256_hex(dedupe_key(ticket)).substr(0, 32) + ".json");
}

namespace {

Status write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return fail(Errc::io, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    done += static_cast<std::size_t>(wrote);
  }
  return {};
}

void sync_directory(const std::filesystem::path& directory) {
  // Best effort: makes the new name durable; a failure here leaves the ticket written.
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

Result<FileResult> DirectoryTicketSink::file(const Ticket& ticket) {
  if (auto ok = validate(ticket); !ok) return tl::unexpected(ok.error());
  const std::filesystem::path target = path_for(ticket);
  if (std::filesystem::exists(target)) return FileResult::duplicate;

  std::string temp = (directory_ / ".ticket-XXXXXX").string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return fail(Errc::io, fmt::format("cannot create a temporary file in {}: {}; check the directory's permissions",
                                      directory_.string(), std::strerror(errno)));
  }
  Status written = write_all(fd, to_json_text(ticket), temp);
  if (written && ::fsync(fd) != 0) {
    written = fail(Errc::io, fmt::format("cannot sync {}: {}", temp, std::strerror(errno)));
  }
  ::close(fd);
  if (!written) {
    ::unlink(temp.c_str());
    return tl::unexpected(written.error());
  }
  // link() never replaces an existing name: of two writers racing on one key, one wins.
  const int linked = ::link(temp.c_str(), target.c_str());
  const int link_errno = errno;
  ::unlink(temp.c_str());
  if (linked != 0) {
    if (link_errno == EEXIST) return FileResult::duplicate;
    return fail(Errc::io, fmt::format("cannot file ticket {} as {}: {}", ticket.id, target.string(),
                                      std::strerror(link_errno)));
  }
  sync_directory(directory_);
  return FileResult::filed;
}

Result<std::vector<Ticket>> DirectoryTicketSink::list() const {
  std::vector<Ticket> tickets;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory_, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("ticket-") || entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) return fail(Errc::io, fmt::format("cannot read ticket {}", entry.path().string()));
    auto ticket = ticket_from_json_text(text.str(), entry.path().string());
    if (!ticket) return tl::unexpected(ticket.error());
    tickets.push_back(std::move(*ticket));
  }
  if (error) {
    return fail(Errc::io, fmt::format("cannot list the ticket directory {}: {}", directory_.string(), error.message()));
  }
  std::sort(tickets.begin(), tickets.end(), [](const Ticket& a, const Ticket& b) {
    return a.created_at_ms != b.created_at_ms ? a.created_at_ms < b.created_at_ms : a.id < b.id;
  });
  return tickets;
}

Result<FileResult> MemoryTicketSink::file(const Ticket& ticket) {
  if (auto ok = validate(ticket); !ok) return tl::unexpected(ok.error());
  const std::string key = dedupe_key(ticket);
  for (const auto& filed : tickets_) {
    if (dedupe_key(filed) == key) return FileResult::duplicate;
  }
  tickets_.push_back(ticket);
  return FileResult::filed;
}

Status validate(const WebhookSinkConfig& config) {
  const std::string_view url = config.url;
  const bool http = url.starts_with("http://") || url.starts_with("https://");
  const std::size_t host_at = url.find("://") + 3;
  if (!http || host_at >= url.size() || url[host_at] == '/') {
    return fail(Errc::config,
                fmt::format("the ticket webhook url '{}' must be http(s)://host/path; fix [tickets] url", config.url));
  }
  if (config.timeout_ms <= 0 || config.retry_backoff_ms <= 0) {
    return fail(Errc::config, "the ticket webhook's timeout_ms and retry_backoff_ms must be positive");
  }
  if (config.max_attempts < 1 || config.max_attempts > 10) {
    return fail(Errc::config, "the ticket webhook's max_attempts must be between 1 and 10");
  }
  return {};
}

std::string webhook_body(const Ticket& ticket) { return to_json(ticket).dump(); }

}  // namespace kiln::qualification
