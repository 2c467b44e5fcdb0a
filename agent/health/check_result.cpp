#include "agent/health/check_result.h"

#include <array>

namespace kiln::agent::health {

std::string_view to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::pass: return "pass";
    case CheckStatus::warn: return "warn";
    case CheckStatus::fail: return "fail";
    case CheckStatus::skip: return "skip";
  }
  KILN_ASSERT(false, "every CheckStatus is named above");
  return "";
}

Result<CheckStatus> parse_check_status(std::string_view text) {
  for (CheckStatus status :
       {CheckStatus::pass, CheckStatus::warn, CheckStatus::fail, CheckStatus::skip}) {
    if (text == to_string(status)) return status;
  }
  return fail(Errc::invalid_argument,
              "unknown check status '" + std::string(text) + "'; use pass, warn, fail or skip");
}

CheckStatus verdict(const std::vector<CheckResult>& results) {
  bool any_pass = false;
  bool any_warn = false;
  for (const auto& result : results) {
    if (result.status == CheckStatus::fail) return CheckStatus::fail;
    any_warn = any_warn || result.status == CheckStatus::warn;
    any_pass = any_pass || result.status == CheckStatus::pass;
  }
  if (any_warn) return CheckStatus::warn;
  return any_pass ? CheckStatus::pass : CheckStatus::skip;
}

std::string summarize(const std::vector<CheckResult>& results) {
  std::array<int, 4> counts{};
  for (const auto& result : results) ++counts[static_cast<std::size_t>(result.status)];
  return std::to_string(counts[0]) + " pass, " + std::to_string(counts[1]) + " warn, " +
         std::to_string(counts[2]) + " fail, " + std::to_string(counts[3]) + " skip";
}

}  // namespace kiln::agent::health
