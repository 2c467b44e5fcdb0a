// How the kiln command shows times and ids to people.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cli {

std::int64_t wall_now_ms();
// "14:05 (in 1h59m)", local time, for a coordinator wall-clock time; "-" for none.
std::string when_text(std::uint64_t at_ms);
// "2026-11-30 07:34:12Z".
std::string utc_time_text(std::int64_t ms);
// The first 12 characters of a bundle id, as listings show it.
std::string short_id(const std::string& id);

}  // namespace kiln::cli
