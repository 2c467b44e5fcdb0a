#include "agent/health/evaluate.h"

#include <doctest/doctest.h>

#include "agent/health/diagnostics.h"

namespace kiln::agent::health {
namespace {

const RevisionTargets& rev_a() { static const auto t = default_health_targets(); return *t.find("a"); }

drivers::ChipTelemetry healthy_telemetry() {
  drivers::ChipTelemetry t;
  t.temperature_c = 45;
  t.power_w = 80;
  t.clock_mhz = 1500;
  t.ecc_corrected = 2;
  t.link_up = true;
  return t;
}

const CheckResult& find(const std::vector<CheckResult>& results, const std::string& check) {
  for (const auto& result : results) {
    if (result.check == check) return result;
  }
  FAIL("no result for check " << check);
  return results.front();
}

drivers::SelfTestResult self_test(drivers::SelfTestKind kind, double figure, bool passed = true) {
  drivers::SelfTestResult r;
  r.kind = kind;
  r.level = 3;
  r.passed = passed;
  r.errors_found = passed ? 0 : 11;
  r.detail = passed ? "clean" : "11 compute results differ from their known answers";
  r.memory_bandwidth_gb_per_s = kind == drivers::SelfTestKind::memory ? figure : 0;
  r.interconnect_bandwidth_gb_per_s = kind == drivers::SelfTestKind::interconnect ? figure : 0;
  r.compute_tflop_per_s = kind == drivers::SelfTestKind::compute ? figure : 0;
  return r;
}

TEST_CASE("healthy telemetry passes ecc, thermal, link and power") {
  const auto results = evaluate_telemetry(3, healthy_telemetry(), &rev_a());
  REQUIRE(results.size() == 4);
  for (const auto& result : results) {
    CHECK_MESSAGE(result.status == CheckStatus::pass, result.check << ": " << result.message);
    CHECK(result.chip == 3u);
    CHECK(result.reason_code == "ok");
    CHECK(result.recommended_action.empty());
  }
  CHECK(find(results, "thermal").measured.at("temperature_c") == 45);
}

TEST_CASE("any uncorrected ECC error fails with drain and level 3 diagnostics") {
  auto t = healthy_telemetry();
  t.ecc_uncorrected = 1;
  t.ecc_corrected = 1000;
  const auto results = evaluate_telemetry(0, t, &rev_a());
  const auto& ecc = find(results, "ecc");
  CHECK(ecc.status == CheckStatus::fail);
  CHECK(ecc.reason_code == "ecc_uncorrected");
  CHECK(ecc.category == "memory");
  CHECK(ecc.recommended_action == "drain and run level 3 diagnostics");
  CHECK(ecc.measured.at("ecc_uncorrected") == 1);
}

TEST_CASE("many corrected ECC errors warn, under the threshold pass") {
  auto t = healthy_telemetry();
  t.ecc_corrected = 100;
  CHECK(find(evaluate_telemetry(0, t, &rev_a()), "ecc").status == CheckStatus::warn);
  CHECK(find(evaluate_telemetry(0, t, &rev_a()), "ecc").reason_code == "ecc_corrected_high");
  t.ecc_corrected = 99;
  CHECK(find(evaluate_telemetry(0, t, &rev_a()), "ecc").status == CheckStatus::pass);
}

TEST_CASE("temperature warns over the warn limit and fails over the fail limit or throttled") {
  auto t = healthy_telemetry();
  t.temperature_c = 86;
  auto thermal = find(evaluate_telemetry(0, t, &rev_a()), "thermal");
  CHECK(thermal.status == CheckStatus::warn);
  CHECK(thermal.reason_code == "temperature_high");
  CHECK(thermal.category == "thermal");

  t.temperature_c = 95.5;
  thermal = find(evaluate_telemetry(0, t, &rev_a()), "thermal");
  CHECK(thermal.status == CheckStatus::fail);
  CHECK(thermal.reason_code == "temperature_critical");

  t.temperature_c = 80;  // under the warn limit, but the chip says it throttles
  t.throttled = true;
  thermal = find(evaluate_telemetry(0, t, &rev_a()), "thermal");
  CHECK(thermal.status == CheckStatus::fail);
  CHECK(thermal.reason_code == "thermal_throttling");
  CHECK(thermal.measured.at("throttled") == 1);
}

TEST_CASE("the temperature limits are per revision") {
  auto t = healthy_telemetry();
  t.temperature_c = 83;  // over b's warn limit (82), under a's (85)
  const auto targets = default_health_targets();
  CHECK(find(evaluate_telemetry(0, t, targets.find("a")), "thermal").status == CheckStatus::pass);
  CHECK(find(evaluate_telemetry(0, t, targets.find("b")), "thermal").status == CheckStatus::warn);
}

TEST_CASE("a link down fails in the interconnect category") {
  auto t = healthy_telemetry();
  t.link_up = false;
  const auto results = evaluate_telemetry(0, t, &rev_a());
  const auto& link = find(results, "link");
  CHECK(link.status == CheckStatus::fail);
  CHECK(link.reason_code == "link_down");
  CHECK(link.category == "interconnect");
  CHECK_FALSE(link.recommended_action.empty());
}

TEST_CASE("power above the revision's limit warns") {
  auto t = healthy_telemetry();
  t.power_w = 401;
  const auto results = evaluate_telemetry(0, t, &rev_a());
  const auto& power = find(results, "power");
  CHECK(power.status == CheckStatus::warn);
  CHECK(power.reason_code == "power_above_limit");
  CHECK(power.category == "power");
}

TEST_CASE("without targets for the revision, limit checks skip but link still runs") {
  auto t = healthy_telemetry();
  t.link_up = false;
  t.ecc_uncorrected = 5;
  const auto results = evaluate_telemetry(0, t, nullptr);
  CHECK(find(results, "ecc").status == CheckStatus::skip);
  CHECK(find(results, "ecc").reason_code == "no_targets_for_revision");
  CHECK(find(results, "link").status == CheckStatus::fail);
}

TEST_CASE("a compute figure below 95% of target warns, below 85% fails") {
  const auto targets = default_health_targets();
  const auto* a = targets.find("a");  // 190 TFLOP/s
  auto judge = [&](double figure) {
    return evaluate_self_test(1, self_test(drivers::SelfTestKind::compute, figure), a, targets);
  };
  CHECK(judge(188).status == CheckStatus::pass);
  CHECK(judge(181).status == CheckStatus::pass);  // 95.3%
  const auto warn = judge(179);                    // 94.2%
  CHECK(warn.status == CheckStatus::warn);
  CHECK(warn.reason_code == "compute_below_target");
  CHECK(warn.category == "compute");
  CHECK(warn.measured.at("fraction_of_target") == doctest::Approx(179.0 / 190.0));
  const auto failed = judge(161);  // 84.7%
  CHECK(failed.status == CheckStatus::fail);
  CHECK(failed.reason_code == "compute_below_target");
  CHECK(failed.measured.at("compute_tflop_per_s") == 161);
  CHECK(failed.measured.at("target") == 190);
}

TEST_CASE("the same figure is judged against each revision's own target") {
  const auto targets = default_health_targets();
  const auto result = self_test(drivers::SelfTestKind::memory, 1600);
  CHECK(evaluate_self_test(0, result, targets.find("a"), targets).status == CheckStatus::pass);
  // 1600 GB/s is 67% of revision b's 2400.
  const auto on_b = evaluate_self_test(0, result, targets.find("b"), targets);
  CHECK(on_b.status == CheckStatus::fail);
  CHECK(on_b.reason_code == "memory_bandwidth_low");
}

TEST_CASE("functional self-test errors fail with their own reason, whatever the figure") {
  const auto targets = default_health_targets();
  const auto sdc = evaluate_self_test(2, self_test(drivers::SelfTestKind::compute, 190, false),
                                      targets.find("a"), targets);
  CHECK(sdc.status == CheckStatus::fail);
  CHECK(sdc.reason_code == "compute_errors");
  CHECK(sdc.recommended_action.find("quarantine") != std::string::npos);
  CHECK(sdc.message.find("known answers") != std::string::npos);

  const auto memory = evaluate_self_test(2, self_test(drivers::SelfTestKind::memory, 1600, false),
                                         targets.find("a"), targets);
  CHECK(memory.reason_code == "memory_errors");
  CHECK(memory.category == "memory");
  const auto link = evaluate_self_test(
      2, self_test(drivers::SelfTestKind::interconnect, 0, false), targets.find("a"), targets);
  CHECK(link.reason_code == "interconnect_failed");
  CHECK(link.category == "interconnect");
}

TEST_CASE("chip count: mismatch fails, match passes, no expectation skips") {
  CHECK(evaluate_chip_count(8, 8).status == CheckStatus::pass);
  const auto missing = evaluate_chip_count(7, 8);
  CHECK(missing.status == CheckStatus::fail);
  CHECK(missing.reason_code == "chip_count_mismatch");
  CHECK(missing.category == "config");
  CHECK(missing.message.find("7") != std::string::npos);
  CHECK(evaluate_chip_count(7, 0).status == CheckStatus::skip);
}

CheckResult firmware_result(std::uint32_t chip, const std::string& version,
                            const std::string& revision = "a") {
  drivers::ChipIdentity id;
  id.index = chip;
  id.serial = "KCA-" + std::to_string(chip);
  id.hardware_revision = revision;
  drivers::FirmwareSlots slots;
  slots.version_a = version;
  slots.version_b = "0.9.0";
  slots.valid_a = true;
  slots.valid_b = true;
  return evaluate_chip_firmware(chip, id, slots);
}

TEST_CASE("firmware versions must agree across chips") {
  std::vector<CheckResult> results = {firmware_result(0, "1.0.0"), firmware_result(1, "1.0.0")};
  CHECK(evaluate_firmware_consistency(results).status == CheckStatus::pass);
  results.push_back(firmware_result(2, "1.1.0"));
  const auto mismatch = evaluate_firmware_consistency(results);
  CHECK(mismatch.status == CheckStatus::fail);
  CHECK(mismatch.reason_code == "firmware_mismatch");
  CHECK(mismatch.category == "firmware");
  CHECK(mismatch.message.find("1.1.0 on chip 2") != std::string::npos);
  CHECK(mismatch.message.find("1.0.0 on chips 0, 1") != std::string::npos);
  CHECK(evaluate_firmware_consistency({}).status == CheckStatus::skip);
}

TEST_CASE("chips of mixed revisions fail the revision check") {
  const std::vector<CheckResult> results = {firmware_result(0, "1.0.0", "a"),
                                            firmware_result(1, "1.0.0", "b")};
  const auto mixed = evaluate_revision_consistency(results);
  CHECK(mixed.status == CheckStatus::fail);
  CHECK(mixed.reason_code == "revision_mismatch");
}

TEST_CASE("an active slot without a valid image fails the chip's firmware check") {
  drivers::ChipIdentity id;
  drivers::FirmwareSlots slots;
  slots.version_a = "1.0.0";
  slots.valid_a = false;
  const auto result = evaluate_chip_firmware(0, id, slots);
  CHECK(result.status == CheckStatus::fail);
  CHECK(result.reason_code == "firmware_active_invalid");
}

TEST_CASE("workloads: none configured warns, a missing program fails") {
  CHECK(evaluate_workloads({}).status == CheckStatus::warn);
  CHECK(evaluate_workloads({}).reason_code == "no_workloads_configured");
  CHECK(evaluate_workloads({{"mlp", "/bin/true", true, true}}).status == CheckStatus::pass);
  const auto missing =
      evaluate_workloads({{"mlp", "/bin/true", true, true}, {"gpt", "/opt/gpt", false, false}});
  CHECK(missing.status == CheckStatus::fail);
  CHECK(missing.reason_code == "workload_missing");
  CHECK(missing.message.find("/opt/gpt") != std::string::npos);
}

TEST_CASE("the verdict: any fail fails, else any warn warns, skips alone are no pass") {
  CheckResult pass;
  pass.status = CheckStatus::pass;
  CheckResult warn;
  warn.status = CheckStatus::warn;
  CheckResult failed;
  failed.status = CheckStatus::fail;
  CheckResult skip;
  skip.status = CheckStatus::skip;
  CHECK(verdict({}) == CheckStatus::skip);
  CHECK(verdict({skip, skip}) == CheckStatus::skip);
  CHECK(verdict({pass, skip}) == CheckStatus::pass);
  CHECK(verdict({pass, warn, skip}) == CheckStatus::warn);
  CHECK(verdict({warn, failed, pass}) == CheckStatus::fail);
  CHECK(summarize({pass, warn, failed, skip, pass}) == "2 pass, 1 warn, 1 fail, 1 skip");
}

TEST_CASE("a timed-out check fails with check_timed_out, its category and the reset action") {
  const auto result = timed_out_result(CheckKind::memory, 4u, 60000);
  CHECK(result.status == CheckStatus::fail);
  CHECK(result.reason_code == "check_timed_out");
  CHECK(result.category == "memory");
  CHECK(result.recommended_action ==
        "reset the chip; if it stays wedged, drain the node for the lab");
  CHECK(result.measured.at("deadline_s") == 60);
  CHECK(timed_out_result(CheckKind::telemetry, 0u, 1000).category == "firmware");
}

TEST_CASE("a busy chip's self-test is skipped, other driver errors fail") {
  CheckReading reading;
  reading.kind = CheckKind::memory;
  reading.chip = 1;
  reading.error = Error{Errc::unavailable, "chip 1 is bound to pid 42"};
  const auto targets = default_health_targets();
  auto results = evaluate_reading(reading, targets, std::nullopt);
  REQUIRE(results.size() == 1);
  CHECK(results[0].status == CheckStatus::skip);
  CHECK(results[0].reason_code == "chip_busy");
  reading.error = Error{Errc::device, "the chip stopped answering"};
  results = evaluate_reading(reading, targets, std::nullopt);
  CHECK(results[0].status == CheckStatus::fail);
  CHECK(results[0].reason_code == "self_test_error");
}

TEST_CASE("a reading survives its JSON line, and backend chatter around it is ignored") {
  CheckReading reading;
  reading.kind = CheckKind::compute;
  reading.chip = 5;
  reading.level = 3;
  reading.identity = drivers::ChipIdentity{5, "KCB-1", "b", "0000:15:00.0", 1, 96ull << 30};
  reading.self_test = self_test(drivers::SelfTestKind::compute, 301.5);
  const std::string output = "backend says hello\n" + std::string(kReadingMarker) +
                             reading_to_json(reading) + "\nmore noise\n";
  auto parsed = find_reading(output);
  REQUIRE_MESSAGE(parsed, (parsed ? "" : parsed.error().message));
  CHECK(parsed->kind == CheckKind::compute);
  CHECK(parsed->chip == 5u);
  CHECK(parsed->identity->hardware_revision == "b");
  CHECK(parsed->self_test->compute_tflop_per_s == 301.5);
  CHECK(parsed->self_test->kind == drivers::SelfTestKind::compute);

  CHECK_FALSE(find_reading("Segmentation fault\n"));
  CHECK(find_reading(std::string(kReadingMarker) + "{not json").error().code == Errc::bad_message);
}

TEST_CASE("a check result survives JSON") {
  auto result = timed_out_result(CheckKind::compute, 2u, 1500);
  result.attributes["serial"] = "KCA-7";
  auto parsed = parse_check_result_json(check_result_to_json(result));
  REQUIRE(parsed);
  CHECK(parsed->check == "compute");
  CHECK(parsed->chip == 2u);
  CHECK(parsed->status == CheckStatus::fail);
  CHECK(parsed->reason_code == "check_timed_out");
  CHECK(parsed->measured == result.measured);
  CHECK(parsed->attributes == result.attributes);
  CHECK_FALSE(parse_check_result_json("{\"check\": 1}"));
}

}  // namespace
}  // namespace kiln::agent::health
