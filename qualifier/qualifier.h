// kiln-qualifier: drives every qualification run that is asked for. It lists the run requests
// on the coordinator, claims each one that has no finished report (a claim holds for claim_ms
// and is renewed while the run is driven; the coordinator refuses another qualifier's claim
// until it expires), and drives the claimed runs, each on its own connection: the comparison,
// the release's soak rounds, flake-budget tickets and the new baselines (run_service.h decides
// them), then the finished report. A run whose qualifier died is taken up again from the
// coordinator's records: its jobs by config hash, so nothing is measured twice.
#pragma once

#include <atomic>
#include <memory>

#include "common/error.h"
#include "qualification/model_set.h"
#include "records/risk_register.h"
#include "qualifier/qualifier_config.h"

namespace kiln::qualifier {

// What the qualifier's runs are judged by: the qualification set and the risk register (empty
// without [qualifier] risk_register).
struct Setup {
  qualification::ModelSet set;
  qualification::RiskRegister risks;
};

// What check-config and the start check before anything runs: the model set reads and matches
// the workload catalog, the risk register reads, the golden directory holds references, the
// ticket sink opens, the key files load. Errc::config, saying what to fix.
Result<Setup> check_setup(const QualifierConfig& config);

// Runs until `stop` is set. Fails only when it cannot start (the coordinator's answer to its
// first request says it may not be a qualifier: a role other than ci, or an unknown key).
Status run_qualifier(const QualifierConfig& config, const Setup& setup, const std::atomic<bool>& stop);

}  // namespace kiln::qualifier
