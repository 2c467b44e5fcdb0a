#include "coordinator/qualification/bisect.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {

ProbeVerdict probe_verdict_from(stats::Verdict verdict) {
  switch (verdict) {
    case stats::Verdict::regression: return ProbeVerdict::bad;
    case stats::Verdict::improvement:
    case stats::Verdict::no_change: return ProbeVerdict::good;
    case stats::Verdict::inconclusive: return ProbeVerdict::inconclusive;
  }
  return ProbeVerdict::inconclusive;
}

ProbeVerdict probe_verdict_from_correctness(bool passed) { return passed ? ProbeVerdict::good : ProbeVerdict::bad; }

std::string_view to_string(BisectOutcome outcome) {
  return outcome == BisectOutcome::culprit_found ? "culprit_found" : "ambiguous";
}

Status validate(const BisectOptions& options) {
  if (options.max_attempts_per_change < 1) {
    return fail(Errc::invalid_argument, "max_attempts_per_change must be at least 1");
  }
  if (options.max_total_probes < 1) return fail(Errc::invalid_argument, "max_total_probes must be at least 1");
  return {};
}

Bisection::Bisection(std::vector<std::string> candidates, BisectOptions options)
    : candidates_(std::move(candidates)), options_(options), bad_index_(candidates_.size() - 1) {}

Result<Bisection> Bisection::start(std::vector<std::string> candidate_change_ids, BisectOptions options) {
  if (auto ok = validate(options); !ok) return tl::unexpected(ok.error());
  if (candidate_change_ids.empty()) {
    return fail(Errc::invalid_argument,
                "a bisection needs at least one candidate change between the good and the bad bundle");
  }
  std::set<std::string> unique(candidate_change_ids.begin(), candidate_change_ids.end());
  if (unique.size() != candidate_change_ids.size()) {
    return fail(Errc::invalid_argument, "the candidate changes of a bisection must have unique ids");
  }
  return Bisection(std::move(candidate_change_ids), options);
}

bool Bisection::probeable(std::size_t index) const {
  return index >= good_count_ && index < bad_index_ && running_.count(index) == 0 && skipped_.count(index) == 0;
}

bool Bisection::exhausted() const {
  if (!running_.empty()) return false;
  if (probes_started_ >= options_.max_total_probes) return true;
  for (std::size_t i = good_count_; i < bad_index_; ++i) {
    if (probeable(i)) return false;
  }
  return true;
}

bool Bisection::finished() const { return good_count_ == bad_index_ || exhausted(); }

void Bisection::cancel_obsolete() {
  for (auto it = running_.begin(); it != running_.end();) {
    if (*it < good_count_ || *it >= bad_index_ || good_count_ == bad_index_) {
      pending_cancels_.push_back(*it);
      cancelled_.insert(*it);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

BisectPlan Bisection::next_probes(std::size_t free_nodes) {
  BisectPlan plan;
  if (finished()) cancel_obsolete();
  plan.cancel = std::move(pending_cancels_);
  pending_cancels_.clear();
  plan.finished = finished();
  if (plan.finished) return plan;

  // Segments between known points: the last good (good_count_ - 1, -1 for the good bundle),
  // the running probes, and the first bad. A segment (a, b] holds b - a candidates.
  struct Segment {
    long long low = 0;
    long long high = 0;
    std::vector<std::size_t> probeable;
    std::size_t new_probes = 0;
  };
  std::vector<long long> points = {static_cast<long long>(good_count_) - 1};
  for (std::size_t index : running_) points.push_back(static_cast<long long>(index));
  points.push_back(static_cast<long long>(bad_index_));
  std::vector<Segment> segments;
  for (std::size_t s = 0; s + 1 < points.size(); ++s) {
    Segment segment{points[s], points[s + 1], {}, 0};
    for (long long i = segment.low + 1; i < segment.high; ++i) {
      if (probeable(static_cast<std::size_t>(i))) segment.probeable.push_back(static_cast<std::size_t>(i));
    }
    segments.push_back(std::move(segment));
  }
  // Give each new probe to the segment whose parts would stay largest: minimises the range left
  // after this round, and splits a fresh range into k + 1 equal parts.
  const std::size_t budget = std::min(free_nodes, options_.max_total_probes - probes_started_);
  for (std::size_t given = 0; given < budget; ++given) {
    Segment* best = nullptr;
    for (auto& segment : segments) {
      if (segment.new_probes >= segment.probeable.size()) continue;
      const auto length = static_cast<std::size_t>(segment.high - segment.low);
      if (best == nullptr ||
          length * (best->new_probes + 1) > static_cast<std::size_t>(best->high - best->low) * (segment.new_probes + 1)) {
        best = &segment;
      }
    }
    if (best == nullptr) break;
    ++best->new_probes;
  }
  if (std::any_of(segments.begin(), segments.end(), [](const Segment& part) { return part.new_probes > 0; })) ++rounds_;
  for (const auto& segment : segments) {
    const std::size_t m = segment.new_probes;
    const std::size_t p = segment.probeable.size();
    for (std::size_t j = 1; j <= m; ++j) {
      // Evenly spaced over the probeable changes; distinct because m <= p.
      const std::size_t index = segment.probeable[j * p / (m + 1)];
      const int attempt = ++attempts_[index];
      running_.insert(index);
      round_of_[index] = rounds_;
      ++probes_started_;
      plan.start.push_back({index, candidates_[index], attempt});
    }
  }
  std::sort(plan.start.begin(), plan.start.end(),
            [](const Probe& a, const Probe& b) { return a.change_index < b.change_index; });
  return plan;
}

Status Bisection::on_probe_result(std::size_t change_index, ProbeVerdict verdict, std::string detail) {
  if (change_index >= candidates_.size()) {
    return fail(Errc::invalid_argument, fmt::format("probe result for change index {}, but the bisection has only {} "
                                                    "candidates",
                                                    change_index, candidates_.size()));
  }
  const bool was_running = running_.erase(change_index) > 0;
  if (!was_running && cancelled_.count(change_index) == 0) {
    return fail(Errc::conflict, fmt::format("no probe of change {} is running; report only the probes the plan "
                                            "started",
                                            candidates_[change_index]));
  }
  ProbeRecord record{change_index, candidates_[change_index], attempts_[change_index], verdict, std::move(detail),
                     !was_running, false, round_of_[change_index]};
  record.contradicts = (verdict == ProbeVerdict::good && change_index >= bad_index_) ||
                       (verdict == ProbeVerdict::bad && change_index < good_count_);
  if (record.contradicts) {
    ++contradictions_;
  } else if (!record.obsolete) {
    switch (verdict) {
      case ProbeVerdict::good: good_count_ = std::max(good_count_, change_index + 1); break;
      case ProbeVerdict::bad: bad_index_ = std::min(bad_index_, change_index); break;
      case ProbeVerdict::inconclusive:
        if (attempts_[change_index] >= options_.max_attempts_per_change) skipped_.insert(change_index);
        break;
    }
    cancel_obsolete();
  }
  evidence_.push_back(std::move(record));
  return {};
}

std::optional<BisectResult> Bisection::result() const {
  if (!finished()) return std::nullopt;
  BisectResult result;
  result.culprit_index = bad_index_;
  result.culprit_change_id = candidates_[bad_index_];
  result.candidates = candidates_;
  result.evidence = evidence_;
  result.probes_started = probes_started_;
  result.rounds = rounds_;
  result.contradictions = contradictions_;
  if (good_count_ == bad_index_) {
    result.outcome = BisectOutcome::culprit_found;
    result.suspects = {result.culprit_change_id};
    const std::string before = good_count_ == 0 ? "the last good bundle" : candidates_[good_count_ - 1];
    result.detail = fmt::format("change {} is the culprit: the bundle up to {} is good, with {} it is bad ({} probes)",
                                result.culprit_change_id, before, result.culprit_change_id, probes_started_);
  } else {
    result.outcome = BisectOutcome::ambiguous;
    for (std::size_t i = good_count_; i <= bad_index_; ++i) result.suspects.push_back(candidates_[i]);
    const bool out_of_budget = probes_started_ >= options_.max_total_probes;
    result.detail = fmt::format(
        "{} suspects remain ({}): {}", result.suspects.size(), fmt::join(result.suspects, ", "),
        out_of_budget ? fmt::format("the probe budget of {} ran out", options_.max_total_probes)
                      : fmt::format("the changes between them stayed inconclusive after {} attempts each",
                                    options_.max_attempts_per_change));
  }
  if (contradictions_ > 0) {
    result.detail += fmt::format("; {} probe results contradicted others: a probe may be flaky", contradictions_);
  }
  return result;
}

std::size_t expected_rounds(std::size_t candidates, std::size_t parallel_probes) {
  KILN_ASSERT(parallel_probes >= 1, "a search needs at least one probe per round");
  std::size_t rounds = 0;
  std::size_t reach = 1;
  while (reach < candidates) {
    reach *= parallel_probes + 1;
    ++rounds;
  }
  return rounds;
}

nlohmann::json to_json(const BisectResult& result) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const auto& record : result.evidence) {
    evidence.push_back({{"change_index", record.change_index},
                        {"change", record.change_id},
                        {"attempt", record.attempt},
                        {"verdict", to_string(record.verdict)},
                        {"detail", record.detail},
                        {"obsolete", record.obsolete},
                        {"contradicts", record.contradicts},
                        {"round", record.round}});
  }
  return {{"outcome", to_string(result.outcome)},
          {"culprit_index", result.culprit_index},
          {"culprit", result.culprit_change_id},
          {"suspects", result.suspects},
          {"candidates", result.candidates},
          {"probes_started", result.probes_started},
          {"rounds", result.rounds},
          {"contradictions", result.contradictions},
          {"detail", result.detail},
          {"probes", evidence}};
}

}  // namespace kiln::qualification
