#include "tools/bench/bench_scale_slices.h"

#include <fstream>
#include <string>

#include <fmt/format.h>

namespace kiln::bench {

nlohmann::json slice_json(const FleetOptions& options) {
  nlohmann::json keys = nlohmann::json::array();
  for (const KeyPair& k : options.keys) keys.push_back({k.public_key, k.secret_key});
  return {{"endpoint", options.endpoint},
          {"server_public_key", options.server_public_key},
          {"first_index", options.first_index},
          {"threads", options.threads},
          {"echo", options.echo},
          {"heartbeat_interval_ms", options.heartbeat_interval_ms},
          {"liveness_missed_beats", options.liveness_missed_beats},
          {"connects_per_second", options.connects_per_second},
          {"keys", keys}};
}

kiln::Result<FleetOptions> read_slice(const std::filesystem::path& path) {
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const auto wrong = [&] {
    return tl::unexpected(kiln::Error{kiln::Errc::invalid_argument,
                                      fmt::format("{} is not a fleet slice written by kiln-bench-scale; --fleet-slice "
                                                  "is internal, leave it to the bench",
                                                  path.string())});
  };
  if (!json.is_object()) return wrong();
  FleetOptions options;
  try {
    options.endpoint = json.at("endpoint").get<std::string>();
    options.server_public_key = json.at("server_public_key").get<std::string>();
    options.first_index = json.at("first_index").get<std::size_t>();
    options.threads = json.at("threads").get<int>();
    options.echo = json.at("echo").get<bool>();
    options.heartbeat_interval_ms = json.at("heartbeat_interval_ms").get<std::uint32_t>();
    options.liveness_missed_beats = json.at("liveness_missed_beats").get<std::uint32_t>();
    options.connects_per_second = json.at("connects_per_second").get<std::uint32_t>();
    for (const auto& k : json.at("keys")) options.keys.push_back({k.at(0).get<std::string>(), k.at(1).get<std::string>()});
  } catch (const nlohmann::json::exception&) {
    return wrong();
  }
  return options;
}

}  // namespace kiln::bench
