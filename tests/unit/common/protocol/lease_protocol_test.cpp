// The lease messages on the wire: each round-trips through the codec, and out-of-range values
// are refused with the field named.
#include <doctest/doctest.h>

#include "common/protocol/codec.h"
#include "common/protocol/json.h"

using namespace kiln;
using namespace kiln::protocol;

namespace {

LeaseSummary sample_lease() {
  LeaseSummary l;
  l.lease_id = 3;
  l.state = LeaseState::preempting;
  l.owner = "alice";
  l.chips = 8;
  l.hardware_revision = "b";
  l.duration_ms = 7200000;
  l.placement = {LeasePlacement{"n07", {0, 1, 2, 3, 4, 5, 6, 7}}};
  l.requested_at_ms = 1000;
  l.granted_at_ms = 2000;
  l.expires_at_ms = 7202000;
  l.grace_deadline_ms = 302000;
  l.job_ids = {41, 42};
  l.detail = "preempted for job 44 (presubmit)";
  l.event_seq = 2;
  return l;
}

template <class T>
T round_trip(const T& message) {
  auto frames = encode(make_envelope(message, 5, 4));
  REQUIRE_MESSAGE(frames.has_value(), frames.error().message);
  auto decoded = decode(frames->header, frames->body);
  REQUIRE_MESSAGE(decoded.has_value(), decoded.error().message);
  CHECK(decoded->header.type == T::kType);
  return std::get<T>(decoded->body);
}

}  // namespace

TEST_CASE("lease messages round-trip through the codec") {
  const LeaseSummary lease = sample_lease();
  CHECK(to_json(round_trip(LeaseGranted{lease})) == to_json(LeaseGranted{lease}));
  const LeasePending pending{lease, "no node of revision b has 8 free chips", 9000};
  CHECK(to_json(round_trip(pending)) == to_json(pending));
  const RequestLease request{0, 2, "a", 3600000, PriorityClass::experiment};
  CHECK(to_json(round_trip(request)) == to_json(request));
  CHECK(round_trip(ReleaseLease{3}).lease_id == 3);
  CHECK(round_trip(ListLeases{true}).include_ended);
  CHECK(round_trip(LeaseList{{lease, lease}}).leases.size() == 2);
  const WatchLease watch{3, 2, 5000};
  CHECK(to_json(round_trip(watch)) == to_json(watch));
  const LeaseEvent event{2, LeaseEventKind::preempt_notice, "release within 5m", lease};
  CHECK(to_json(round_trip(event)) == to_json(event));
  SubmitJob job;
  job.workload = "train";
  job.args = {"--steps", "100"};
  job.chips = 4;
  const SubmitInLease in_lease{3, job};
  CHECK(to_json(round_trip(in_lease)) == to_json(in_lease));
  CHECK(round_trip(QueueWhy{0, 3}).lease_id == 3);
  const QueueExplanation why{true, "pending", {"no node of revision b has 8 free chips"}, 9000, "lease L3 is pending"};
  CHECK(to_json(round_trip(why)) == to_json(why));
}

TEST_CASE("lease messages with values out of range are refused, naming the field") {
  RequestLease too_short{8, 0, "", 1000, PriorityClass::experiment};
  auto frames = encode(make_envelope(too_short, 1));
  REQUIRE_FALSE(frames.has_value());
  CHECK(frames.error().message.find("duration_ms") != std::string::npos);

  LeaseSummary empty_placement = sample_lease();
  empty_placement.placement = {LeasePlacement{"n07", {}}};
  auto bad = encode(make_envelope(LeaseGranted{empty_placement}, 1));
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().message.find("lease.placement[0].chip_indices") != std::string::npos);

  WatchLease too_long{3, 0, 120000};
  auto watch = encode(make_envelope(too_long, 1));
  REQUIRE_FALSE(watch.has_value());
  CHECK(watch.error().message.find("wait_ms") != std::string::npos);
}
