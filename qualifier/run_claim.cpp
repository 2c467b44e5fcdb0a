#include "qualifier/run_claim.h"

#include <fmt/format.h>

#include "client/records_client.h"

namespace kiln::qualifier {

Status Claim::keep() {
  const auto now = Clock::now();
  if (now - tried_ < std::chrono::milliseconds(claim_.lease_ms / 3)) return {};
  tried_ = now;
  auto ok = qualification::shell::claim_run(client_, claim_);
  if (ok) {
    renewed_ = now;
    return {};
  }
  if (ok.error().code == Errc::conflict) return fail(Errc::conflict, "its claim was lost: " + ok.error().message);
  if (now - renewed_ >= std::chrono::milliseconds(claim_.lease_ms)) {
    return fail(Errc::unavailable, fmt::format("its claim could not be renewed for {} ms ({}); another qualifier may "
                                               "take it up",
                                               claim_.lease_ms, ok.error().message));
  }
  return {};
}

}  // namespace kiln::qualifier
