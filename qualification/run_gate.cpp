#include "qualification/run_gate.h"

#include <algorithm>

namespace kiln::qualification {

RunGate::RunGate(const std::vector<bool>& judged, const stats::PerfGateOptions& options, std::uint64_t seed,
                 const std::vector<stats::SequentialPlan>& plans)
    : member_of_pair_(judged.size()) {
  for (std::size_t p = 0; p < judged.size(); ++p) {
    if (!judged[p]) continue;
    member_of_pair_[p] = pair_of_member_.size();
    pair_of_member_.push_back(p);
  }
  states_.assign(pair_of_member_.size(), MemberState::waiting_first);
  waiting_first_ = pair_of_member_.size();
  if (pair_of_member_.empty()) return;
  if (options.rule == stats::GateRule::fixed) {
    gate_.emplace(pair_of_member_.size(), options, seed);
    return;
  }
  KILN_ASSERT(plans.size() == judged.size(), "the sequential rule needs a plan for every pair");
  std::vector<stats::SequentialPlan> member_plans;
  for (std::size_t pair : pair_of_member_) member_plans.push_back(plans[pair]);
  gate_.emplace(options, seed, std::move(member_plans));
}

std::optional<std::size_t> RunGate::member(std::size_t pair) const {
  return pair < member_of_pair_.size() ? member_of_pair_[pair] : std::nullopt;
}

bool RunGate::left(std::size_t pair) const {
  const auto m = member(pair);
  return m && states_[*m] == MemberState::left;
}

GateStep RunGate::add_first_samples(std::size_t pair, std::span<const double> baseline,
                                    std::span<const double> candidate) {
  const auto m = member(pair);
  if (!m || states_[*m] == MemberState::left) return {};
  gate_->add_samples(*m, baseline, candidate);
  states_[*m] = MemberState::measured;
  --waiting_first_;
  return start_if_ready();
}

GateStep RunGate::add_more_samples(std::size_t pair, std::span<const double> baseline,
                                   std::span<const double> candidate) {
  const auto m = member(pair);
  if (!m || states_[*m] == MemberState::left) return {};
  gate_->add_samples(*m, baseline, candidate);
  return evaluate();
}

GateStep RunGate::leave(std::size_t pair) {
  const auto m = member(pair);
  if (!m || states_[*m] == MemberState::left) return {};
  const bool had_samples = states_[*m] != MemberState::waiting_first;
  states_[*m] = MemberState::left;
  if (had_samples) return {};
  --waiting_first_;
  return start_if_ready();
}

GateStep RunGate::start_if_ready() {
  if (started_ || !gate_ || waiting_first_ > 0) return {};
  started_ = true;
  return evaluate();
}

GateStep RunGate::evaluate() {
  GateStep step;
  for (const stats::GateRequest& request : gate_->evaluate()) {
    step.jobs.push_back({pair_of_member_[request.model],
                         request.kind == stats::GateRequest::Kind::extra_repeats ? JobPurpose::extra_repeats
                                                                                 : JobPurpose::confirmation,
                         static_cast<std::uint32_t>(std::max(request.repeats_per_side, 1))});
  }
  for (std::size_t m = 0; m < states_.size(); ++m) {
    const stats::ModelGateOutcome& outcome = gate_->outcomes()[m];
    if (states_[m] != MemberState::measured || !outcome.finished) continue;
    states_[m] = MemberState::concluded;
    step.concluded.push_back({pair_of_member_[m], outcome});
  }
  return step;
}

}  // namespace kiln::qualification
