#include "release/shell/release_config.h"

#include <filesystem>

#include <fmt/format.h>

#include "common/config/toml_errors.h"

namespace kiln::release {

namespace {

constexpr std::string_view kRemedy = "fix release.toml (docs/releases.md)";

Result<std::string> text_setting(const toml::table& table, std::string_view key, const std::string& path,
                                 std::string fallback) {
  const toml::node* node = table.get(key);
  if (node == nullptr) return fallback;
  if (!node->is_string()) {
    return fail(Errc::config, fmt::format("{}: '{}' must be a string; {}", config::where(path, node->source()), key,
                                          kRemedy));
  }
  return node->as_string()->get();
}

// Relative paths are relative to release.toml's folder, like client.toml's key files.
std::string resolve(const std::string& value, const std::string& path) {
  if (value.empty() || std::filesystem::path(value).is_absolute()) return value;
  return (std::filesystem::path(path).parent_path() / value).lexically_normal().string();
}

}  // namespace

Result<ReleaseConfig> load_release_config(const std::string& path) {
  auto text = config::read_text_file(path, "the release settings", "pass --release-config FILE or set "
                                                                   "KILN_RELEASE_CONFIG (docs/releases.md)");
  if (!text) return fail(Errc::config, text.error().message);
  return release_config_from_text(*text, path);
}

Result<ReleaseConfig> release_config_from_text(std::string_view text, const std::string& path) {
  auto root = config::parse_toml(text, path, kRemedy);
  if (!root) return tl::unexpected(root.error());
  if (auto ok = config::check_known_keys(path, *root, "release.toml", {"release"}); !ok) return tl::unexpected(ok.error());
  const toml::table* release = (*root)["release"].as_table();
  if (release == nullptr) return fail(Errc::config, fmt::format("{}: [release] is missing; {}", path, kRemedy));
  if (auto ok = config::check_known_keys(path, *release, "[release]", {"repo", "main_branch", "remote", "forge"}); !ok) {
    return tl::unexpected(ok.error());
  }
  ReleaseConfig config;
  for (auto [key, field] : {std::pair{"repo", &ReleaseConfig::repo}, std::pair{"main_branch", &ReleaseConfig::main_branch},
                            std::pair{"remote", &ReleaseConfig::remote}}) {
    auto value = text_setting(*release, key, path, config.*field);
    if (!value) return tl::unexpected(value.error());
    config.*field = *value;
  }
  if (config.repo.empty()) return fail(Errc::config, fmt::format("{}: [release] repo is missing: the working clone "
                                                                 "of the environments repository; {}", path, kRemedy));
  config.repo = resolve(config.repo, path);
  if (const toml::table* forge = (*release)["forge"].as_table()) {
    if (auto ok = config::check_known_keys(path, *forge, "[release.forge]",
                                           {"kind", "api_url", "project", "token_file", "timeout_ms"});
        !ok) {
      return tl::unexpected(ok.error());
    }
    for (auto [key, field] : {std::pair{"kind", &ForgeConfig::kind}, std::pair{"api_url", &ForgeConfig::api_url},
                              std::pair{"project", &ForgeConfig::project},
                              std::pair{"token_file", &ForgeConfig::token_file}}) {
      auto value = text_setting(*forge, key, path, "");
      if (!value) return tl::unexpected(value.error());
      config.forge.*field = *value;
    }
    if (config.forge.kind != "gitea" && config.forge.kind != "gitlab") {
      return fail(Errc::config, fmt::format("{}: [release.forge] kind must be \"gitea\" or \"gitlab\"; {}", path, kRemedy));
    }
    if (!config.forge.api_url.starts_with("http://") && !config.forge.api_url.starts_with("https://")) {
      return fail(Errc::config, fmt::format("{}: [release.forge] api_url must be an http:// or https:// URL; {}", path,
                                            kRemedy));
    }
    if (config.forge.project.empty() || config.forge.token_file.empty()) {
      return fail(Errc::config, fmt::format("{}: [release.forge] needs project and token_file; {}", path, kRemedy));
    }
    if (config.remote.empty()) {
      return fail(Errc::config, fmt::format("{}: a forge needs [release] remote: the pull request is opened from the "
                                            "pushed branch; {}", path, kRemedy));
    }
    config.forge.token_file = resolve(config.forge.token_file, path);
    if (auto timeout = (*forge)["timeout_ms"].value<std::int64_t>()) {
      if (*timeout < 100 || *timeout > 600000) {
        return fail(Errc::config, fmt::format("{}: [release.forge] timeout_ms must be 100 to 600000; {}", path, kRemedy));
      }
      config.forge.timeout_ms = *timeout;
    }
  }
  return config;
}

}  // namespace kiln::release
