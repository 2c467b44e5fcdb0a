#include "records/run_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::qualification {
namespace {

Result<std::string> string_field(const nlohmann::json& json, const char* name, bool required, const char* what) {
  auto it = json.find(name);
  if (it == json.end() && !required) return std::string();
  if (it == json.end() || !it->is_string() || (required && it->get<std::string>().empty())) {
    return fail(Errc::invalid_argument, fmt::format("a {} needs {} (a non-empty string)", what, name));
  }
  return it->get<std::string>();
}

Result<std::uint64_t> count_field(const nlohmann::json& json, const char* name, std::uint64_t low, std::uint64_t high,
                                  std::uint64_t fallback, const char* what) {
  auto it = json.find(name);
  if (it == json.end()) return fallback;
  // A JSON integer written from a signed type is not "unsigned" to nlohmann::json: any integer >= 0.
  const bool whole = it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0);
  if (!whole || it->get<std::uint64_t>() < low || it->get<std::uint64_t>() > high) {
    return fail(Errc::invalid_argument, fmt::format("a {}'s {} must be an integer from {} to {}", what, name, low, high));
  }
  return it->get<std::uint64_t>();
}

}  // namespace

nlohmann::json to_json(const RunRequest& request) {
  nlohmann::json json = {{"run_id", request.run_id},     {"tier", to_string(request.tier)},
                         {"bundle_id", request.bundle_id}, {"change", request.change},
                         {"repeats", request.repeats},   {"max_jobs", request.max_jobs},
                         {"max_models", request.max_models}, {"soak_rounds", request.soak_rounds},
                         {"accept", request.accept}};
  if (request.deadline_ms != 0) json["deadline_ms"] = request.deadline_ms;
  if (request.perf_rule) json["perf_rule"] = stats::to_string(*request.perf_rule);
  return json;
}

stats::GateRule perf_rule_for(const RunRequest& request) {
  if (request.perf_rule) return *request.perf_rule;
  return request.tier == Tier::nightly ? stats::GateRule::sequential : stats::GateRule::fixed;
}

Result<RunRequest> run_request_from_json(const nlohmann::json& json) {
  constexpr const char* what = "run request";
  if (!json.is_object()) return fail(Errc::invalid_argument, "a run request is a JSON object");
  RunRequest request;
  auto run_id = string_field(json, "run_id", true, what);
  if (!run_id) return tl::unexpected(run_id.error());
  request.run_id = *run_id;
  auto tier = string_field(json, "tier", true, what);
  if (!tier) return tl::unexpected(tier.error());
  auto parsed_tier = tier_from_string(*tier);
  if (!parsed_tier) {
    return fail(Errc::invalid_argument, fmt::format("run request {}: tier '{}' is not smoke, nightly or release",
                                                    request.run_id, *tier));
  }
  request.tier = *parsed_tier;
  auto bundle = string_field(json, "bundle_id", true, what);
  if (!bundle) return tl::unexpected(bundle.error());
  request.bundle_id = *bundle;
  auto change = string_field(json, "change", false, what);
  if (!change) return tl::unexpected(change.error());
  request.change = *change;
  auto repeats = count_field(json, "repeats", 1, 1000, 10, what);
  auto max_jobs = count_field(json, "max_jobs", 1, 1024, 32, what);
  auto max_models = count_field(json, "max_models", 0, 100000, 0, what);
  auto soak_rounds = count_field(json, "soak_rounds", 0, 100, 2, what);
  for (const auto* field : {&repeats, &max_jobs, &max_models, &soak_rounds}) {
    if (!*field) return tl::unexpected(field->error());
  }
  request.repeats = static_cast<std::uint32_t>(*repeats);
  request.max_jobs = static_cast<std::uint32_t>(*max_jobs);
  request.max_models = static_cast<std::uint32_t>(*max_models);
  request.soak_rounds = static_cast<std::uint32_t>(*soak_rounds);
  if (auto it = json.find("accept"); it != json.end()) {
    if (!it->is_boolean()) return fail(Errc::invalid_argument, "a run request's accept must be true or false");
    request.accept = it->get<bool>();
  }
  auto deadline = count_field(json, "deadline_ms", 0, INT64_MAX, 0, what);
  if (!deadline) return tl::unexpected(deadline.error());
  request.deadline_ms = static_cast<TimeMs>(*deadline);
  auto rule = string_field(json, "perf_rule", false, what);
  if (!rule) return tl::unexpected(rule.error());
  if (!rule->empty()) {
    request.perf_rule = enum_from_name<stats::GateRule>(*rule);
    if (!request.perf_rule) {
      return fail(Errc::invalid_argument, fmt::format("run request {}: perf_rule '{}' is not sequential or fixed",
                                                      request.run_id, *rule));
    }
  }
  return request;
}

nlohmann::json to_json(const RunClaim& claim) {
  nlohmann::json json = {{"run_id", claim.run_id}, {"owner", claim.owner}, {"lease_ms", claim.lease_ms}};
  if (claim.expires_at_ms != 0) json["expires_at_ms"] = claim.expires_at_ms;
  return json;
}

Result<RunClaim> run_claim_from_json(const nlohmann::json& json) {
  constexpr const char* what = "run claim";
  if (!json.is_object()) return fail(Errc::invalid_argument, "a run claim is a JSON object");
  RunClaim claim;
  auto run_id = string_field(json, "run_id", true, what);
  if (!run_id) return tl::unexpected(run_id.error());
  auto owner = string_field(json, "owner", true, what);
  if (!owner) return tl::unexpected(owner.error());
  auto lease = count_field(json, "lease_ms", kMinClaimMs, kMaxClaimMs, 0, what);
  if (!lease) return tl::unexpected(lease.error());
  if (*lease == 0) return fail(Errc::invalid_argument, "a run claim needs lease_ms (how long it holds, in ms)");
  auto expires = count_field(json, "expires_at_ms", 0, INT64_MAX, 0, what);
  if (!expires) return tl::unexpected(expires.error());
  claim.run_id = *run_id;
  claim.owner = *owner;
  claim.lease_ms = static_cast<DurationMs>(*lease);
  claim.expires_at_ms = static_cast<TimeMs>(*expires);
  return claim;
}

}  // namespace kiln::qualification
