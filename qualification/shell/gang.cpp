#include "qualification/shell/gang.h"

#include <algorithm>
#include <optional>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/sha256.h"
#include "common/time.h"

namespace kiln::qualification::shell {

protocol::SubmitJob rank_job(const protocol::SubmitJob& job, int rank) {
  protocol::SubmitJob ranked = job;
  ranked.seed = (job.seed + static_cast<std::uint64_t>(rank)) & static_cast<std::uint64_t>(INT64_MAX);
  ranked.config_hash = sha256_hex(fmt::format("{}/node {}", job.config_hash, rank));
  return ranked;
}

protocol::RequestLease gang_lease(const protocol::SubmitJob& job, int nodes, const std::string& revision) {
  protocol::RequestLease lease;
  lease.chips = 0;
  lease.nodes = static_cast<std::uint32_t>(nodes);
  lease.hardware_revision = revision;
  lease.duration_ms = std::uint64_t{job.timeout_ms} + 10 * kMinuteMs;
  lease.priority_class = job.priority_class;
  return lease;
}

std::uint64_t lease_id_of(const protocol::Body& reply) {
  if (const auto* granted = std::get_if<protocol::LeaseGranted>(&reply)) return granted->lease.lease_id;
  if (const auto* pending = std::get_if<protocol::LeasePending>(&reply)) return pending->lease.lease_id;
  return 0;
}

JobResult combine_ranks(std::uint64_t tag, std::vector<JobResult> ranks) {
  JobResult combined;
  combined.tag = tag;
  std::vector<std::string> nodes;
  std::vector<std::string> problems;
  for (const auto& rank : ranks) {
    nodes.push_back(rank.node_id);
    combined.ran = combined.ran && rank.ran;
    if (!rank.ran) problems.push_back(rank.node_id + ": " + rank.detail);
    if (rank.ran && !rank.correct) {
      combined.correct = false;
      problems.push_back(rank.node_id + ": " + rank.correctness_detail);
    }
  }
  combined.node_id = fmt::format("{}", fmt::join(nodes, "+"));
  // One backend for the gang, or none when its ranks ran on several.
  if (!ranks.empty() && std::all_of(ranks.begin(), ranks.end(), [&](const JobResult& r) {
        return r.backend == ranks.front().backend;
      })) {
    combined.backend = ranks.front().backend;
  }
  if (!ranks.empty()) combined.chips = ranks.front().chips;
  (combined.ran ? combined.correctness_detail : combined.detail) = fmt::format("{}", fmt::join(problems, "; "));
  if (!combined.ran || ranks.empty()) return combined;
  auto add_up = [&](auto field) -> std::optional<std::vector<double>> {
    std::vector<double> sum = ranks.front().*field;
    for (const auto& rank : ranks) {
      if ((rank.*field).size() != sum.size()) return std::nullopt;
    }
    for (std::size_t r = 1; r < ranks.size(); ++r) {
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += (ranks[r].*field)[i];
    }
    return sum;
  };
  auto candidate = add_up(&JobResult::candidate_samples);
  auto baseline = add_up(&JobResult::baseline_samples);
  // Wrong outputs are the gang's verdict whatever its samples: only a correct gang needs them.
  if ((!candidate || !baseline) && !combined.correct) return combined;
  if (!candidate || !baseline) {
    combined.ran = false;
    combined.detail = fmt::format("the {} nodes kept different numbers of samples (some were taken while a chip "
                                  "throttled); measure again",
                                  ranks.size());
    return combined;
  }
  combined.candidate_samples = std::move(*candidate);
  combined.baseline_samples = std::move(*baseline);
  return combined;
}

}  // namespace kiln::qualification::shell
