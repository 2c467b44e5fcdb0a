#include "qualification/ticket.h"

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
