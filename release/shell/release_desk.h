// `kiln release`'s shell: carries out the pure decisions of promotion.h in a working clone of
// the environments repository (git by argv), reads gate evidence from the coordinator's run
// and bundle records, pushes to the configured remote, opens the forge's pull request, and
// records every commit that changed an environment as a coordinator `promotion` record.
//
// Git is the truth; the coordinator's records follow it. Every command first records the
// environment changes of main's history the coordinator lacks (reconcile), so a command killed
// between its commit and its record, or a merge made with plain git or on a forge, is recorded
// by the next command.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/time.h"
#include "client/client.h"
#include "release/environments.h"
#include "release/promotion.h"
#include "release/rollout_gate.h"
#include "release/shell/git.h"
#include "release/shell/release_config.h"

namespace kiln::release {

// The key name and role the coordinator knows this client by.
Result<Actor> whoami(cli::Client& client);

struct Promoted {
  Promotion promotion;
  std::string commit;
  std::string pull_request_url;  // empty without a forge (or when it gave none)
  std::string audit_problem;     // why the coordinator's audit log lacks this step; empty: written
  std::string replaced_commit;   // the earlier proposal the branch held (merged, or behind main); empty: none
};
struct Approved {
  ProposedPromotion proposed;
  std::string commit;
  std::string audit_problem;
};
struct Merged {
  ProposedPromotion proposed;
  std::string commit;
  std::string record_problem;  // why the promotion record is not written yet; empty: written
};
struct RolledBack {
  Rollback rollback;
  std::string commit;
  std::string record_problem;
};
struct BundleAdded {
  BundleFile bundle;
  std::string commit;  // empty: main had this exact file already
  std::string audit_problem;
};
struct ReleaseStatus {
  std::string main_commit;
  std::map<std::string, DesiredEnvironment> desired;
  std::map<std::string, EnvironmentFile> environments;
  std::vector<ProposedPromotion> open_promotions;
  std::size_t recorded_now = 0;  // environment changes reconcile recorded on this call
};

class ReleaseDesk {
 public:
  // `now`: the wall clock in ms (tests pass their own).
  ReleaseDesk(ReleaseConfig config, cli::Client& client, Actor actor, std::function<TimeMs()> now);

  // Writes bundles/<id>.toml on main from the coordinator's record of the bundle, with the
  // SHA-256 of each layer's package (`packages`: layer -> file), and commits and pushes it.
  Result<BundleAdded> add_bundle(const std::string& bundle, const std::map<std::string, std::string>& packages,
                                 const std::string& one_way_firmware);
  Result<Promoted> promote(const std::string& bundle, const std::string& environment,
                           const std::string& one_way_override);
  // `target`: an environment with one open promotion, or a promotion branch.
  Result<Approved> approve(const std::string& target);
  Result<Merged> merge(const std::string& target);
  Result<RolledBack> rollback(const std::string& environment);
  Result<ReleaseStatus> status();

 private:
  Status sync();
  Result<Snapshot> snapshot_at(const std::string& rev);
  Result<std::vector<EnvironmentChange>> history_of(const std::string& environment);
  // Records main's environment changes the coordinator lacks: a promotion record and an audit
  // line each.
  Result<std::size_t> reconcile();
  // A line of the coordinator's audit log for a step of this desk; the coordinator adds who and
  // when. Returns why it could not be written; empty: written.
  std::string audit(const std::string& action, const std::string& subject, const std::string& detail);
  Result<std::string> resolve_branch(const std::string& target);
  Result<ProposedPromotion> read_proposed(const std::string& branch);
  // The promotion a target names, with main's file of the environment it promotes to: what
  // approve and merge both decide on, after syncing and recording what main has.
  struct OpenPromotion {
    std::string branch;
    ProposedPromotion proposed;
    EnvironmentFile environment;
  };
  Result<OpenPromotion> open_promotion(const std::string& target);
  // Releases follow health: the environment takes the bundle only once the coordinator's rollout
  // of it in the environment it follows converged with every node up (check_previous_rollout).
  Status previous_rollout_healthy(const EnvironmentFile& environment, const std::string& bundle_id);
  // An earlier proposal on a promotion branch: one merged since (and perhaps rolled back) or left
  // behind by main is replaced by the new one; one still open on main's tip is a conflict.
  struct EarlierProposal {
    std::string commit;         // the branch's tip, the remote's where it has one; empty: no branch
    std::string remote_commit;  // the remote's tip, which the push replaces; empty: none there
  };
  Result<EarlierProposal> superseded_proposal(const std::string& branch);
  Result<std::string> commit_with_message(const std::vector<std::string>& commit_args, const std::string& message);
  // `replaced_commit`: the remote's tip of `ref` this push may replace; empty: a fast-forward only.
  Status push(const std::string& ref, const std::string& replaced_commit = "");
  Result<std::string> rev(const std::string& name);

  ReleaseConfig config_;
  cli::Client& client_;
  Actor actor_;
  std::function<TimeMs()> now_;
  Git git_;
};

}  // namespace kiln::release
