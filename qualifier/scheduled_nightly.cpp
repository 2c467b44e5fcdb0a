#include "qualifier/scheduled_nightly.h"

#include <set>

#include <fmt/format.h>

#include "qualification/run_verdict.h"
#include "qualification/schedule.h"
#include "qualification/shell/bundle_builder.h"
#include "qualifier/qualifier_log.h"

namespace kiln::qualifier {

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

void ask_for_scheduled_nightly(cli::Client& client, const QualifierConfig& config,
                               const std::vector<q::RunRequest>& requests, qs::ChangeHistory& changes,
                               std::string& problem) {
  std::set<std::string> requested;
  for (const auto& request : requests) requested.insert(request.run_id);
  const auto night = q::nightly_due(config.schedule, wall_now_ms() + config.clock_offset_ms, requested);
  if (!night) return;
  const auto say_once = [&problem](const std::string& line) {
    if (line != problem) say(line);
    problem = line;
  };
  auto builder = qs::make_configured_builder(config.builder, config.builder_args, config.bundle_dir,
                                             config.schedule_revisions);
  auto history = changes.read(client);
  if (!history) {
    return say_once(fmt::format("tonight's nightly {} is due but the change history could not be read: {}; trying "
                                "again on the next poll",
                                night->run_id, history.error().message));
  }
  auto built = qs::build_recorded_bundle(client, *builder, "", *history);
  if (!built) {
    return say_once(fmt::format("tonight's nightly {} is due but its bundle could not be built: {}; trying again on the "
                                "next poll",
                                night->run_id, built.error().message));
  }
  q::RunRequest request;
  request.run_id = night->run_id;
  request.tier = q::Tier::nightly;
  request.bundle_id = built->bundle.id;
  request.max_models = config.schedule_max_models;
  request.deadline_ms = night->deadline_ms - config.clock_offset_ms;
  if (auto ok = qs::request_run(client, request); !ok) {
    return say_once(fmt::format("could not ask for tonight's nightly {}: {}", night->run_id, ok.error().message));
  }
  say(fmt::format("asked for tonight's nightly {}: bundle {} at change {}, due by {} UTC", night->run_id,
                  built->bundle.id.substr(0, 12), built->at_change, q::utc_time_of_day(request.deadline_ms)));
}

}  // namespace kiln::qualifier
