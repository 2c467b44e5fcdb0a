#include "common/health/check_result.h"

#include <array>

namespace kiln::health {

Result<CheckStatus> parse_check_status(std::string_view text) {
  if (auto status = enum_from_name<CheckStatus>(text)) return *status;
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

}  // namespace kiln::health
