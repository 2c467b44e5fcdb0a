// The host's artifact cache: verified files under their SHA-256 in [artifacts] cache_dir,
//   <cache_dir>/sha256/<digest>   an artifact, read-only; its mtime is its last use
//   <cache_dir>/incoming/         downloads under way, moved into sha256/ once verified
// and fetching what a job needs into it: from the HTTP artifact store named in agent.toml when
// there is one, else (or when it lacks the file) from the coordinator. Every entry is checked
// against its digest before a job uses it; a damaged one is removed and fetched again.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

#include "agent/host/agent_config.h"
#include "common/error.h"
#include "common/protocol/messages_types.h"

namespace kiln::agent::artifacts {

std::string cache_path(const std::string& cache_dir, const std::string& sha256);

// Makes sure every artifact is in the cache and matches its digest and size, fetching what is
// missing or damaged; says what it did on `log`, one line each. The error names the artifact,
// where it was looked for and what to do (a source that sent other bytes than the digest is a
// failure, never retried from the same source).
Status fetch_artifacts(const AgentConfig& config, const std::vector<protocol::ArtifactRef>& artifacts,
                       std::ostream& log);

// Removes the least recently used entries while the cache is over cache_limit_bytes, never one
// in `in_use`, and downloads abandoned longer ago than twice fetch_timeout_ms; returns the
// digests it removed, for the log.
std::vector<std::string> evict_artifacts(const ArtifactSettings& settings, const std::set<std::string>& in_use);

// `kiln-agent fetch-artifacts SHA256:SIZE...`: fetch_artifacts for the agent (which runs it as a
// process before a job that names artifacts) or for a person warming a host's cache. 0 when all
// are in the cache, 1 when one could not be had.
int run_fetch_command(const AgentConfig& config, const std::vector<std::string>& specs, std::ostream& out,
                      std::ostream& err);

}  // namespace kiln::agent::artifacts
