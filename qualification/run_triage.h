// The triage phase of a run: a correctness failure is rerun with the same bundle, min_reruns
// times on another healthy node of the revision (choose_rerun_node) and once on the failing node,
// and triage() tells hardware from software from flaky. A model on several nodes points at no one
// node, and a failure with no other node to rerun on cannot be confirmed: both are bisected as
// software regressions, unconfirmed, and the detail says why. Pure: the run starts the reruns and
// acts on the decision.
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "qualification/run_types.h"
#include "qualification/triage.h"

namespace kiln::qualification {

struct TriageRerun {
  JobPurpose purpose = JobPurpose::triage_rerun;  // or origin_rerun, on the failing node
  std::string node_id;
};

// Either reruns to start, or a software regression to bisect without them.
struct TriageStart {
  std::vector<TriageRerun> reruns;
  std::optional<std::string> unconfirmed;  // the regression's detail when nothing can be rerun
};

class RunTriage {
 public:
  RunTriage(TriageOptions options, std::size_t pairs);

  // The pair failed on `failure.node_id` (empty: unknown) with `detail`. `nodes` > 1: it ran on
  // that many nodes at once.
  TriageStart begin(std::size_t pair, FailedRun failure, const std::string& detail, int nodes,
                    std::span<const NodeCandidate> healthy);
  // A rerun's outcome; nullopt for the rerun on the failing node that could not run (optional
  // evidence: a dead node cannot run it). The decision once every rerun is in.
  std::optional<Result<TriageAction>> on_rerun(std::size_t pair, JobPurpose purpose, std::optional<bool> correct);
  // A rerun on the other node came back from a node quarantined while it ran, `node`: no
  // evidence. The node to run it again on instead (another healthy node of the revision, never
  // one quarantined under an earlier rerun), or nullopt when there is none.
  std::optional<std::string> rerun_elsewhere(std::size_t pair, const std::string& node,
                                             std::span<const NodeCandidate> healthy);

  const std::string& failure_detail(std::size_t pair) const { return pairs_[pair].detail; }
  const std::string& rerun_node(std::size_t pair) const { return pairs_[pair].rerun_node; }
  const TriageOptions& options() const { return options_; }

 private:
  struct PairTriage {
    FailedRun failure;
    std::string detail;
    std::string rerun_node;
    std::vector<RunOutcome> outcomes;
    std::vector<RunOutcome> origin_outcomes;
    std::size_t outstanding = 0;
    std::set<std::string> quarantined;  // rerun nodes whose results were discarded
  };

  TriageOptions options_;
  std::vector<PairTriage> pairs_;
};

}  // namespace kiln::qualification
