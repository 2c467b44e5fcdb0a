#include "cli/ids.h"

#include <fmt/format.h>

namespace kiln::cli {

namespace {

// The number after an optional one-letter prefix, or 0 when it is not one.
std::uint64_t id_number(const std::string& text, char prefix) {
  std::string digits = text;
  if (!digits.empty() && (digits[0] == prefix || digits[0] == prefix + ('a' - 'A'))) digits.erase(0, 1);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoull(digits);
}

}  // namespace

Result<std::uint64_t> parse_job_id(const std::string& text) {
  if (const std::uint64_t id = id_number(text, 'J')) return id;
  return fail(Errc::invalid_argument, fmt::format("'{}' is not a job id; job ids look like 42 or J42 (see `kiln jobs`)",
                                                  text));
}

Result<std::uint64_t> parse_lease_id(const std::string& text) {
  if (const std::uint64_t id = id_number(text, 'L')) return id;
  return fail(Errc::invalid_argument, fmt::format("'{}' is not a lease id; lease ids look like L3 (see `kiln leases`)",
                                                  text));
}

Result<JobOrLease> parse_job_or_lease_id(const std::string& text) {
  if (!text.empty() && (text[0] == 'L' || text[0] == 'l')) {
    if (const std::uint64_t id = id_number(text, 'L')) return JobOrLease{0, id};
  } else if (const std::uint64_t id = id_number(text, 'J')) {
    return JobOrLease{id, 0};
  }
  return fail(Errc::invalid_argument, fmt::format("'{}' is neither a job id (42, J42) nor a lease id (L3)", text));
}

Result<protocol::PriorityClass> parse_priority_class(const std::string& name) {
  if (auto cls = protocol::enum_from_name<protocol::PriorityClass>(name)) return *cls;
  return fail(Errc::invalid_argument,
              fmt::format("--class {} is not one of release, presubmit, bisect, nightly, experiment", name));
}

}  // namespace kiln::cli
