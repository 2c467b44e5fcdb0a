#include "qualification/shell/lapsed_waivers.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "client/records_client.h"
#include "qualification/waiver.h"

namespace kiln::qualification::shell {

Status revoke_lapsed_waivers(cli::Client& client, std::vector<nlohmann::json>& reports, TimeMs now) {
  const bool relies = std::any_of(reports.begin(), reports.end(), [](const nlohmann::json& report) {
    auto waivers = report.find("waivers");
    return waivers != report.end() && waivers->is_array() && !waivers->empty();
  });
  if (!relies) return {};
  auto waivers = list_waivers(client);
  if (!waivers) {
    return fail(waivers.error().code, fmt::format("could not read the waivers in force, which a run relies on: {}; try "
                                                  "again",
                                                  waivers.error().message));
  }
  for (auto& report : reports) qualification::revoke_lapsed_waivers(report, *waivers, now);
  return {};
}

Status revoke_lapsed_waivers(cli::Client& client, nlohmann::json& report, TimeMs now) {
  std::vector<nlohmann::json> one{std::move(report)};
  auto ok = revoke_lapsed_waivers(client, one, now);
  report = std::move(one.front());
  return ok;
}

}  // namespace kiln::qualification::shell
