// The audit log: every lease step, preemption, quarantine, drain and install the core carries out
// is a line naming who (key and role, or the coordinator), what, to what and when; a client's
// own line is stamped with its key, whatever it says.
#include <doctest/doctest.h>

#include <algorithm>

#include "coordinator/core/coordinator_core.h"
#include "tests/support/core_harness.h"

using namespace kiln;
using namespace kiln::coordinator;
using namespace kiln::protocol;
using namespace kiln::coordinator::testing;

namespace {

CoordinatorKnobs knobs() {
  CoordinatorKnobs k;
  k.heartbeat_interval_ms = 1000;
  k.liveness_missed_beats = 1000;
  k.scheduler.grace_ms = 30000;
  k.scheduler.target_start_latency_ms[scheduler::rank(scheduler::RequestClass::presubmit)] = 0;
  return k;
}

// The audit lines with this action, in order.
std::vector<AuditEntry> lines_of(const Harness& h, const std::string& action) {
  std::vector<AuditEntry> found;
  std::copy_if(h.audit.begin(), h.audit.end(), std::back_inserter(found),
               [&](const AuditEntry& e) { return e.action == action; });
  return found;
}

}  // namespace

TEST_CASE("a lease's request, grant, preemption and release are audit lines with who and when") {
  Harness h(knobs(), {}, Now(0, 1'700'000'000'000));
  h.agent("p1", "n01", hello("n01", "a"), Now(10, 1'700'000'000'010));
  REQUIRE(std::holds_alternative<LeaseGranted>(
      h.client("alice", Role::developer, lease_request(8), Now(100, 1'700'000'000'100))));

  const auto requested = lines_of(h, "lease_requested");
  REQUIRE(requested.size() == 1);
  CHECK(requested[0].actor == "alice");
  CHECK(requested[0].role == "developer");
  CHECK(requested[0].subject == "lease L1 of alice");
  CHECK(requested[0].at_ms == 1'700'000'000'100);  // the wall clock, for `kiln audit --since`
  CHECK(requested[0].detail.find("8 chips") != std::string::npos);
  const auto granted = lines_of(h, "lease_granted");
  REQUIRE(granted.size() == 1);
  CHECK(granted[0].actor == "coordinator");
  CHECK(granted[0].role == "coordinator");

  // CI work takes the node: the lease is preempted with notice, by the coordinator.
  (void)h.submit("ci", Role::ci, sleep_job(8, PriorityClass::presubmit), Now(1000, 1'700'000'001'000));
  const auto preempted = lines_of(h, "preempted");
  REQUIRE(preempted.size() == 1);
  CHECK(preempted[0].actor == "coordinator");
  CHECK(preempted[0].subject == "lease L1 of alice");

  REQUIRE(std::holds_alternative<Ok>(h.client("alice", Role::developer, ReleaseLease{1}, Now(2000, 1'700'000'002'000))));
  const auto ended = lines_of(h, "lease_ended");
  REQUIRE(ended.size() == 1);
  CHECK(ended[0].actor == "alice");  // the release names who released it
  CHECK(ended[0].detail == "released by alice");
  // One line per step: the log is in the order things happened.
  for (std::size_t i = 1; i < h.audit.size(); ++i) CHECK(h.audit[i].at_ms >= h.audit[i - 1].at_ms);
}

TEST_CASE("a preempted job, a drain and a quarantine are audit lines; the quarantine by a probe is the coordinator's") {
  Harness h(knobs());
  h.agent("p1", "n01", hello("n01", "a"), 0);
  const auto experiment = h.submit("dev", Role::developer, sleep_job(8, PriorityClass::experiment), 100);
  h.agent("p1", "n01", JobStarted{experiment, 1}, 200);
  (void)h.submit("ci", Role::ci, sleep_job(8, PriorityClass::presubmit), 300);
  const auto preempted = lines_of(h, "preempted");
  REQUIRE(preempted.size() == 1);
  CHECK(preempted[0].subject == "job " + std::to_string(experiment) + " of dev");

  REQUIRE(std::holds_alternative<Ok>(h.client("ops1", Role::ops, DrainNode{"n01", true, "fan swap"}, 400)));
  REQUIRE(std::holds_alternative<Ok>(h.client("ops1", Role::ops, DrainNode{"n01", false, ""}, 500)));
  const auto drained = lines_of(h, "drained");
  REQUIRE(drained.size() == 1);
  CHECK(drained[0].actor == "ops1");
  CHECK(drained[0].role == "ops");
  CHECK(drained[0].subject == "node n01");
  CHECK(drained[0].detail == "fan swap");
  CHECK(lines_of(h, "undrained").size() == 1);

  REQUIRE(std::holds_alternative<Ok>(h.client("lab1", Role::lab, QuarantineNode{"n01", "fan noise", "lab"}, 600)));
  const auto quarantined = lines_of(h, "quarantined");
  REQUIRE(quarantined.size() == 1);
  CHECK(quarantined[0].actor == "lab1");
  CHECK(quarantined[0].detail.find("fan noise") != std::string::npos);

  h.agent("p2", "n02", hello("n02", "a"), 700);
  HealthReport failing;
  failing.verdict = HealthStatus::fail;
  failing.checks.push_back(HealthCheck{"ecc", 3, HealthStatus::fail, "ecc_uncorrected", "memory", "12 uncorrected",
                                       "drain and run level 3 diagnostics"});
  h.agent("p2", "n02", failing, 800);
  const auto by_probe = lines_of(h, "quarantined");
  REQUIRE(by_probe.size() == 2);
  CHECK(by_probe[1].actor == "coordinator");
  CHECK(by_probe[1].subject == "node n02");
}

TEST_CASE("put_audit: a client's line carries its key and role; only the release actions are a client's to write") {
  Harness h(knobs(), {}, Now(0, 1'700'000'000'000));
  const Body ok = h.client("rel", Role::ci, PutAudit{"promotion_proposed", "environment staging", "abc on branch x"},
                           Now(50, 1'700'000'000'050));
  REQUIRE(std::holds_alternative<Ok>(ok));
  REQUIRE(h.audit.size() == 1);
  CHECK(h.audit[0].actor == "rel");
  CHECK(h.audit[0].role == "ci");
  CHECK(h.audit[0].at_ms == 1'700'000'000'050);
  CHECK(h.audit[0].subject == "environment staging");

  // A client may not write the coordinator's own lines (a forged grant or quarantine).
  const Body refused = h.client("rel", Role::admin, PutAudit{"quarantined", "node n01", "x"}, 60);
  REQUIRE(std::holds_alternative<ErrorReply>(refused));
  CHECK(std::get<ErrorReply>(refused).code == "invalid_argument");
  CHECK(std::get<ErrorReply>(refused).message.find("clients record bundle_added") != std::string::npos);
  CHECK(h.audit.size() == 1);
}
