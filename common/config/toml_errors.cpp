#include "common/config/toml_errors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/config/endpoint.h"
#include "common/text/edit_distance.h"

namespace kiln::config {
std::string where(std::string_view source, const toml::source_region& region) {
  if (region.begin.line == 0) return std::string(source);  // a node built in code, not read from the file
  return fmt::format("{}:{}:{}", source, region.begin.line, region.begin.column);
}

Result<toml::table> parse_toml(std::string_view text, std::string_view source, std::string_view remedy) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& error) {
    return fail(Errc::config,
                fmt::format("{}: not valid TOML: {}; {}", where(source, error.source()), error.description(), remedy));
  }
}

Result<std::string> read_text_file(const std::string& path, std::string_view what, std::string_view unreadable_remedy) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Errc::io, fmt::format("cannot read {} {}: {}; {}", what, path, std::strerror(errno), unreadable_remedy));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<toml::table> parse_toml_file(const std::string& path, std::string_view what, std::string_view unreadable_remedy,
                                    std::string_view syntax_remedy) {
  auto text = read_text_file(path, what, unreadable_remedy);
  if (!text) return tl::unexpected(text.error());
  return parse_toml(*text, path, syntax_remedy);
}

std::optional<std::string> nearest_name(std::string_view name, const std::vector<std::string_view>& known) {
  // Up to a third of the name may differ (at least one edit, at most three).
  const std::size_t allowed = std::clamp<std::size_t>(name.size() / 3, 1, 3);
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const std::string_view candidate : known) {
    // Lengths further apart than the allowed edits cannot be near; skipping them keeps a long
    // mistyped key from costing an edit-distance table per known key.
    const std::size_t length_gap = name.size() > candidate.size() ? name.size() - candidate.size()
                                                                   : candidate.size() - name.size();
    if (length_gap > allowed) continue;
    const std::size_t distance = text::edit_distance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = std::string(candidate);
    }
  }
  return best;
}

std::string suggestion(std::string_view name, const std::vector<std::string_view>& known) {
  if (auto near = nearest_name(name, known)) return fmt::format("; did you mean '{}'?", *near);
  return fmt::format("; known keys: {}", fmt::join(known, ", "));
}

Status check_known_keys(std::string_view source, const toml::table& table, std::string_view place,
                        const std::vector<std::string_view>& known) {
  for (const auto& [key, node] : table) {
    if (std::find(known.begin(), known.end(), key.str()) == known.end()) {
      return fail(Errc::config, fmt::format("{}: unknown key '{}' in {}{}", where(source, key.source()), key.str(),
                                            place, suggestion(key.str(), known)));
    }
  }
  return {};
}

void Problems::at(const toml::source_region& region, std::string_view what) {
  problems_.emplace_back(region.begin, fmt::format("{}: {}", where(source_, region), what));
}

void Problems::add(std::string_view what) {
  problems_.emplace_back(toml::source_position{}, fmt::format("{}: {}", source_, what));
}

void Problems::add_located(const toml::source_position& position, std::string_view message) {
  std::size_t start = 0;
  while (start < message.size()) {
    const std::size_t end = std::min(message.find('\n', start), message.size());
    if (end > start) problems_.emplace_back(position, std::string(message.substr(start, end - start)));
    start = end + 1;
  }
}

void Problems::unknown_keys(const toml::table& table, std::string_view place,
                            const std::vector<std::string_view>& known) {
  for (const auto& [key, node] : table) {
    if (std::find(known.begin(), known.end(), key.str()) == known.end()) {
      at(key.source(), fmt::format("unknown key '{}' in {}{}", key.str(), place, suggestion(key.str(), known)));
    }
  }
}

std::vector<std::string> Problems::sorted() const {
  auto order = problems_;
  const auto rank = [](const toml::source_position& p) {
    return p.line == 0 ? std::pair<std::uint32_t, std::uint32_t>(UINT32_MAX, 0)
                       : std::pair<std::uint32_t, std::uint32_t>(p.line, p.column);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const auto& a, const auto& b) { return rank(a.first) < rank(b.first); });
  std::vector<std::string> lines;
  for (auto& [position, text] : order) lines.push_back(std::move(text));
  return lines;
}

Status Problems::status() const {
  if (problems_.empty()) return {};
  return fail(Errc::config, fmt::format("{}", fmt::join(sorted(), "\n")));
}

Result<std::vector<std::string>> coordinator_endpoints(std::string_view at, const toml::node& node,
                                                       std::string_view key) {
  const auto wrong = [&](std::string_view why) {
    return fail(Errc::config, fmt::format("{}: {} {}; write one address, {} = \"tcp://host:port\", or the active "
                                          "coordinator and its standbys, {} = [\"tcp://a:port\", \"tcp://b:port\"]",
                                          at, key, why, key, key));
  };
  std::vector<std::string> endpoints;
  if (const auto* one = node.as_string()) {
    endpoints.push_back(one->get());
  } else if (const auto* list = node.as_array()) {
    for (const toml::node& entry : *list) {
      if (!entry.is_string()) return wrong("must hold strings only");
      endpoints.push_back(entry.as_string()->get());
    }
    if (endpoints.empty()) return wrong("is an empty list");
  } else {
    return wrong("must be a string or a list of strings");
  }
  for (const std::string& endpoint : endpoints) {
    if (auto problem = tcp_endpoint_problem(endpoint, /*binds=*/false)) {
      return fail(Errc::config, fmt::format("{}: {} \"{}\" {}", at, key, endpoint, *problem));
    }
    if (std::count(endpoints.begin(), endpoints.end(), endpoint) > 1) {
      return wrong(fmt::format("lists \"{}\" twice", endpoint));
    }
  }
  return endpoints;
}

}  // namespace kiln::config
