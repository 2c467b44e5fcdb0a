// The claim on one run while the qualifier drives it (the coordinator refuses another qualifier's
// claim until it expires).
#pragma once

#include <chrono>
#include <string>

#include "common/error.h"
#include "client/client.h"
#include "records/run_request.h"
#include "qualifier/qualifier_config.h"

namespace kiln::qualifier {

// Renewed every third of its length; lost when another qualifier holds it, or when it could not
// be renewed for as long as it lasts.
class Claim {
 public:
  using Clock = std::chrono::steady_clock;

  Claim(cli::Client& client, const QualifierConfig& config, std::string run_id, std::string owner)
      : client_(client), claim_{std::move(run_id), std::move(owner), config.claim_ms, 0},
        renewed_(Clock::now()), tried_(renewed_) {}

  // Renews the claim when due. Errc::conflict when another qualifier holds it, Errc::unavailable
  // when it could not be renewed for its whole length.
  Status keep();

 private:
  cli::Client& client_;
  qualification::RunClaim claim_;
  Clock::time_point renewed_;
  Clock::time_point tried_;
};

}  // namespace kiln::qualifier
