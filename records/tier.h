// A qualification run's tier: what a run request asks for and a run report records.
#pragma once

#include <optional>
#include <string_view>

#include "common/enum_names.h"

namespace kiln::qualification {

enum class Tier { smoke, nightly, release };
constexpr EnumTable<Tier, 3> enum_names(Tier) {
  return {{
      {Tier::smoke, "smoke"},
      {Tier::nightly, "nightly"},
      {Tier::release, "release"},
  }};
}
inline std::string_view to_string(Tier value) { return enum_name(value); }
inline std::optional<Tier> tier_from_string(std::string_view name) { return enum_from_name<Tier>(name); }

}  // namespace kiln::qualification
