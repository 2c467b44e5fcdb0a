#include "agent/artifacts/artifact_cache.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>

#include <curl/curl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zmq.hpp>

#include "agent/artifacts/cache_policy.h"
#include "common/keys.h"
#include "common/protocol/artifacts.h"
#include "common/protocol/codec.h"
#include "common/sha256.h"
#include "common/transport/request_channel.h"

namespace kiln::agent::artifacts {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Asked of the coordinator per get_artifact: a reply of this many bytes fits the default 1 MiB
// message limit with room to spare.
constexpr std::uint32_t kChunkBytes = 512 * 1024;
// How long one piece may take before it is asked again: far more than a loaded coordinator
// needs to read half a MiB from its store.
constexpr std::uint32_t kPieceTimeoutMs = 10000;

long remaining_ms(Clock::time_point deadline) {
  return std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

std::string short_digest(const std::string& sha256) { return sha256.substr(0, 12); }

// What one source made of an artifact: the bytes are in `path`, or why not.
struct Download {
  std::string path;
  std::FILE* file = nullptr;
  std::uint64_t written = 0;
  std::uint64_t limit_bytes = 0;
  bool over_limit = false;
  ~Download() {
    if (file != nullptr) std::fclose(file);
  }
};

std::size_t write_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* download = static_cast<Download*>(user);
  const std::size_t bytes = size * count;
  if (download->written + bytes > download->limit_bytes) {
    download->over_limit = true;
    return 0;  // stops the transfer: more bytes than the digest's file has
  }
  download->written += bytes;
  return std::fwrite(data, 1, bytes, download->file);
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};

// GET <http_store>/sha256/<digest> into `path`.
Status fetch_http(const ArtifactSettings& settings, const protocol::ArtifactRef& artifact, const std::string& path,
                  Clock::time_point deadline) {
  const std::string url = settings.http_store + "/sha256/" + artifact.sha256;
  Download download{path, std::fopen(path.c_str(), "wb"), 0, artifact.size_bytes, false};
  if (download.file == nullptr) return fail(Errc::io, fmt::format("cannot write {}; check the cache_dir", path));
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) return fail(Errc::internal, "libcurl could not start a transfer");
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &download);
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(curl.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl.get(), CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, std::max(1L, remaining_ms(deadline)));
  const CURLcode code = curl_easy_perform(curl.get());
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (download.over_limit) {
    return fail(Errc::integrity, fmt::format("{} sent more than the {} bytes artifact {} has; the store holds other "
                                             "bytes under this digest: fix the store",
                                             url, artifact.size_bytes, artifact.sha256));
  }
  if (code != CURLE_OK) {
    return fail(code == CURLE_OPERATION_TIMEDOUT ? Errc::timeout : Errc::io,
                fmt::format("GET {} failed: {}", url, error[0] != '\0' ? error : curl_easy_strerror(code)));
  }
  if (status == 404) return fail(Errc::not_found, fmt::format("GET {}: 404, the store does not have it", url));
  if (status != 200) return fail(Errc::io, fmt::format("GET {}: HTTP status {}", url, status));
  if (std::fflush(download.file) != 0) return fail(Errc::io, fmt::format("cannot write {}", path));
  return {};
}

// get_artifact, piece by piece, over a connection of its own with the agent's key. A piece is
// asked again when the connection drops or no answer comes, so a coordinator restart in the
// middle of a download only delays it.
Status fetch_coordinator(const AgentConfig& config, const protocol::ArtifactRef& artifact, const std::string& path,
                         Clock::time_point deadline) {
  auto keys = load_secret_key_file(config.agent_secret_key_file);
  if (!keys) return tl::unexpected(keys.error());
  auto coordinator_key = load_public_key_file(config.coordinator_public_key_file);
  if (!coordinator_key) return tl::unexpected(coordinator_key.error());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return fail(Errc::io, fmt::format("cannot write {}; check the cache_dir", path));
  transport::Reconnect reconnect;
  reconnect.enabled = true;
  reconnect.before_first_answer = true;
  reconnect.initial_ms = 200;
  reconnect.max_ms = 5000;
  reconnect.give_up_advice = fmt::format("the fetch gave up when fetch_timeout_ms ran out; check that the coordinator "
                                         "is running and reachable from node {}",
                                         config.node_id);
  std::optional<transport::RequestChannel> channel;
  try {
    channel.emplace(coordinator_endpoints(config), std::move(*keys), std::move(*coordinator_key), kPieceTimeoutMs,
                    std::move(reconnect));
  } catch (const zmq::error_t& e) {
    return fail(Errc::io, fmt::format("cannot connect to {}: {}", config.coordinator_endpoint, e.what()));
  }
  std::uint64_t offset = 0;
  while (offset < artifact.size_bytes) {
    const auto left_ms = static_cast<std::uint32_t>(remaining_ms(deadline));
    if (left_ms == 0) {
      return fail(Errc::timeout, fmt::format("the coordinator at {} sent {} of {} bytes before fetch_timeout_ms ran "
                                             "out",
                                             config.coordinator_endpoint, offset, artifact.size_bytes));
    }
    channel->set_give_up_ms(left_ms);
    channel->set_timeout_ms(std::min(left_ms, kPieceTimeoutMs));
    auto reply = channel->request(protocol::GetArtifact{artifact.sha256, offset, kChunkBytes}, /*may_repeat=*/true);
    if (!reply) return tl::unexpected(reply.error());
    const auto* chunk = std::get_if<protocol::ArtifactChunk>(&*reply);
    if (chunk == nullptr || chunk->offset != offset || chunk->sha256 != artifact.sha256) {
      return fail(Errc::bad_message,
                  fmt::format("the coordinator answered get_artifact with {}", protocol::type_name(*reply)));
    }
    if (chunk->size_bytes != artifact.size_bytes) {
      return fail(Errc::integrity, fmt::format("the coordinator holds artifact {} with {} bytes, the job says {}; "
                                               "the job names the wrong size",
                                               artifact.sha256, chunk->size_bytes, artifact.size_bytes));
    }
    if (chunk->data.empty()) {
      return fail(Errc::bad_message, "the coordinator sent an empty piece before the end of the artifact");
    }
    out.write(chunk->data.data(), static_cast<std::streamsize>(chunk->data.size()));
    offset += chunk->data.size();
  }
  out.flush();
  if (!out) return fail(Errc::io, fmt::format("cannot write {}; check free space in the cache_dir", path));
  return {};
}

// Whether the file holds exactly the artifact.
Result<bool> matches(const std::string& path, const protocol::ArtifactRef& artifact) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || size != artifact.size_bytes) return false;
  auto digest = sha256_of_file(path, artifact.size_bytes);
  if (!digest) return digest.error().code == Errc::io ? Result<bool>(tl::unexpected(digest.error())) : false;
  return *digest == artifact.sha256;
}

Status fetch_one(const AgentConfig& config, const protocol::ArtifactRef& artifact, Clock::time_point deadline,
                 std::ostream& log) {
  const ArtifactSettings& settings = config.artifacts;
  const std::string target = cache_path(settings.cache_dir, artifact.sha256);
  std::error_code ec;
  if (fs::exists(target, ec)) {
    auto ok = matches(target, artifact);
    if (!ok) return tl::unexpected(ok.error());
    if (*ok) {
      fs::last_write_time(target, fs::file_time_type::clock::now(), ec);
      log << fmt::format("{} ({}): in the cache, verified\n", artifact.name, short_digest(artifact.sha256));
      return {};
    }
    log << fmt::format("{} ({}): the cached copy is damaged (not its digest or size); removed, fetching it again\n",
                       artifact.name, short_digest(artifact.sha256));
    fs::permissions(target, fs::perms::owner_write, fs::perm_options::add, ec);
    fs::remove(target, ec);
  }
  const std::string incoming =
      (fs::path(settings.cache_dir) / "incoming" / fmt::format("{}.{}", artifact.sha256, ::getpid())).string();
  std::vector<std::string> tried;
  const auto from = [&](const std::string& source, Status fetched) -> Result<bool> {
    if (!fetched) {
      tried.push_back(fetched.error().message);
      if (fetched.error().code == Errc::integrity) return tl::unexpected(fetched.error());
      return false;
    }
    auto ok = matches(incoming, artifact);
    if (!ok) return tl::unexpected(ok.error());
    if (!*ok) {
      auto digest = sha256_of_file(incoming, artifact.size_bytes);
      return fail(Errc::integrity,
                  fmt::format("artifact {} ({}) from {} is not what the job names: {} bytes with SHA-256 {}, expected "
                              "{} bytes with {}; the source holds other bytes under this digest, fix it",
                              artifact.name, artifact.sha256, source, fs::file_size(incoming, ec),
                              digest ? *digest : std::string("unknown"), artifact.size_bytes, artifact.sha256));
    }
    log << fmt::format("{} ({}): fetched from {}, verified\n", artifact.name, short_digest(artifact.sha256), source);
    return true;
  };
  Result<bool> got = false;
  if (!settings.http_store.empty()) {
    got = from(settings.http_store, fetch_http(settings, artifact, incoming, deadline));
  }
  if (got && !*got) {
    got = from("the coordinator", fetch_coordinator(config, artifact, incoming, deadline));
  }
  if (!got || !*got) {
    fs::remove(incoming, ec);
    if (!got) return tl::unexpected(got.error());
    return fail(Errc::not_found, fmt::format("artifact {} ({}) could not be fetched: {}; upload it to the coordinator "
                                             "or the HTTP store, or check the job's digest",
                                             artifact.name, artifact.sha256, fmt::join(tried, "; ")));
  }
  fs::permissions(incoming, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read, ec);
  fs::rename(incoming, target, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot move {} into the cache: {}", incoming, ec.message()));
  return {};
}

}  // namespace

std::string cache_path(const std::string& cache_dir, const std::string& sha256) {
  return (fs::path(cache_dir) / "sha256" / sha256).string();
}

Status fetch_artifacts(const AgentConfig& config, const std::vector<protocol::ArtifactRef>& artifacts,
                       std::ostream& log) {
  if (auto ok = protocol::check_job_artifacts({}, artifacts); !ok) return ok;
  std::error_code ec;
  for (const char* sub : {"sha256", "incoming"}) {
    fs::create_directories(fs::path(config.artifacts.cache_dir) / sub, ec);
    if (ec) {
      return fail(Errc::io, fmt::format("cannot create the artifact cache {}: {}; fix [artifacts] cache_dir in {}",
                                        config.artifacts.cache_dir, ec.message(), config.config_path));
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.artifacts.fetch_timeout_ms);
  for (const protocol::ArtifactRef& artifact : artifacts) {
    if (auto ok = fetch_one(config, artifact, deadline, log); !ok) return ok;
  }
  return {};
}

std::vector<std::string> evict_artifacts(const ArtifactSettings& settings, const std::set<std::string>& in_use) {
  std::vector<CachedArtifact> entries;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(settings.cache_dir) / "sha256", ec)) {
    std::error_code stat_error;
    const auto size = entry.file_size(stat_error);
    const auto used = entry.last_write_time(stat_error);
    if (stat_error) continue;
    const auto used_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(used.time_since_epoch()).count();
    entries.push_back(CachedArtifact{entry.path().filename().string(), size, used_ms});
  }
  std::vector<std::string> evicted = artifacts_to_evict(std::move(entries), in_use, settings.cache_limit_bytes);
  for (const std::string& digest : evicted) fs::remove(cache_path(settings.cache_dir, digest), ec);
  // What a fetch killed at its deadline (or with the agent) left: no fetch lives this long.
  const auto abandoned = fs::file_time_type::clock::now() - 2 * std::chrono::milliseconds(settings.fetch_timeout_ms);
  for (const auto& entry : fs::directory_iterator(fs::path(settings.cache_dir) / "incoming", ec)) {
    std::error_code stat_error;
    if (entry.last_write_time(stat_error) < abandoned && !stat_error) fs::remove(entry.path(), stat_error);
  }
  return evicted;
}

int run_fetch_command(const AgentConfig& config, const std::vector<std::string>& specs, std::ostream& out,
                      std::ostream& err) {
  std::vector<protocol::ArtifactRef> artifacts;
  for (const std::string& spec : specs) {
    // NAME=SHA256:SIZE, or SHA256:SIZE (named by its digest).
    const auto equals = spec.find('=');
    const auto colon = spec.rfind(':');
    protocol::ArtifactRef artifact;
    artifact.name = equals == std::string::npos ? spec.substr(0, std::min(colon, spec.size())) : spec.substr(0, equals);
    const std::size_t digest_at = equals == std::string::npos ? 0 : equals + 1;
    std::uint64_t size = 0;
    const bool parsed = colon != std::string::npos && colon > digest_at &&
                        std::sscanf(spec.c_str() + colon + 1, "%lu", &size) == 1;
    if (!parsed) {
      err << "kiln-agent fetch-artifacts: \"" << spec << "\" is not NAME=SHA256:SIZE or SHA256:SIZE\n";
      return 2;
    }
    artifact.sha256 = spec.substr(digest_at, colon - digest_at);
    artifact.size_bytes = size;
    artifacts.push_back(std::move(artifact));
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);
  auto fetched = fetch_artifacts(config, artifacts, out);
  curl_global_cleanup();
  if (!fetched) {
    // The last line is what the agent reports as the job's failure.
    err << fetched.error().message << "\n";
    return 1;
  }
  return 0;
}

}  // namespace kiln::agent::artifacts
