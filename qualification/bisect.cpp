#include "qualification/bisect.h"

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

  // One round at a time: the next is planned from every answer of this one.
  if (!running_.empty()) return plan;
  std::vector<std::size_t> open;
  for (std::size_t i = good_count_; i < bad_index_; ++i) {
    if (probeable(i)) open.push_back(i);
  }
  const std::size_t budget = std::min(free_nodes, options_.max_total_probes - probes_started_);
  const std::size_t count = std::min(budget, open.size());
  if (count == 0) return plan;
  ++rounds_;
  fewest_offered_ = rounds_ == 1 ? free_nodes : std::min(fewest_offered_, free_nodes);
  // Split the range (good_count_ - 1, bad_index_] into count + 1 parts of nearly equal length:
  // the j-th probe at the j-th (count + 1)-quantile of the range, or the nearest probeable
  // change at or before it (a skipped change is never probed again).
  const std::size_t length = bad_index_ - good_count_ + 1;
  std::size_t next = 0;  // into open: the probes stay distinct and in order
  for (std::size_t j = 1; j <= count; ++j) {
    // ceil(j * length / (count + 1)) past the last good (unsigned: good_count_ - 1 may wrap to
    // the good bundle's -1 and back).
    const std::size_t target = good_count_ - 1 + (j * length + count) / (count + 1);
    std::size_t pick = next;
    while (pick + 1 < open.size() && open[pick + 1] <= target && open.size() - (pick + 1) >= count - j + 1) ++pick;
    next = pick + 1;
    const std::size_t index = open[pick];
    const int attempt = ++attempts_[index];
    running_.insert(index);
    round_of_[index] = rounds_;
    ++probes_started_;
    plan.start.push_back({index, candidates_[index], attempt});
  }
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
        inconclusive_rounds_.insert(record.round);
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
  result.round_bound = round_bound();
  result.probes_per_round = fewest_offered_;
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

std::size_t Bisection::round_bound() const {
  return expected_rounds(candidates_.size(), std::max<std::size_t>(1, fewest_offered_)) + inconclusive_rounds_.size();
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
          {"round_bound", result.round_bound},
          {"probes_per_round", result.probes_per_round},
          {"contradictions", result.contradictions},
          {"detail", result.detail},
          {"probes", evidence}};
}

}  // namespace kiln::qualification
