#include "common/protocol/artifacts.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "common/text/utf8.h"

namespace kiln::protocol {
namespace {

constexpr std::string_view kOne = "{artifact:";
constexpr std::string_view kAll = "{artifacts}";

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
         c == '-';
}

// Calls `on_name` for each {artifact:NAME} of `arg` and `on_text` for the text between them.
template <class Text, class Name, class All>
Status scan(const std::string& arg, Text on_text, Name on_name, All on_all) {
  std::size_t at = 0;
  while (at < arg.size()) {
    const std::size_t one = arg.find(kOne, at);
    const std::size_t all = arg.find(kAll, at);
    const std::size_t next = std::min(one, all);
    if (next == std::string::npos) break;
    on_text(std::string_view(arg).substr(at, next - at));
    if (next == all) {
      on_all();
      at = all + kAll.size();
      continue;
    }
    const std::size_t close = arg.find('}', one);
    if (close == std::string::npos) {
      return fail(Errc::invalid_argument,
                  fmt::format("the argument \"{}\" opens {{artifact: without a closing }}; write {{artifact:NAME}}",
                              text::printable(arg)));
    }
    if (auto s = on_name(std::string_view(arg).substr(one + kOne.size(), close - one - kOne.size())); !s) return s;
    at = close + 1;
  }
  on_text(std::string_view(arg).substr(std::min(at, arg.size())));
  return {};
}

}  // namespace

bool is_sha256_hex(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::optional<std::string> artifact_name_problem(std::string_view name) {
  if (name.empty() || name.size() > kArtifactName.max_len || name.front() == '.' ||
      !std::all_of(name.begin(), name.end(), is_name_char)) {
    return fmt::format("artifact name \"{}\" must be 1 to {} letters, digits, '.', '_' or '-', not starting with '.'",
                       text::printable(std::string(name)), kArtifactName.max_len);
  }
  return std::nullopt;
}

Status check_job_artifacts(const std::vector<std::string>& args, const std::vector<ArtifactRef>& artifacts) {
  std::set<std::string_view> names;
  for (const ArtifactRef& artifact : artifacts) {
    if (auto problem = artifact_name_problem(artifact.name)) {
      return fail(Errc::invalid_argument, *problem + "; rename it");
    }
    if (!names.insert(artifact.name).second) {
      return fail(Errc::invalid_argument,
                  fmt::format("two artifacts are named \"{}\"; give each file of the job its own name", artifact.name));
    }
    if (!is_sha256_hex(artifact.sha256)) {
      return fail(Errc::invalid_argument,
                  fmt::format("artifact \"{}\" has digest \"{}\", not a SHA-256; give its 64 lowercase hex digits "
                              "(sha256sum FILE)",
                              artifact.name, text::printable(artifact.sha256)));
    }
  }
  for (const std::string& arg : args) {
    auto ok = scan(
        arg, [](std::string_view) {},
        [&](std::string_view name) -> Status {
          if (names.count(name) != 0) return {};
          return fail(Errc::invalid_argument,
                      fmt::format("the argument \"{}\" names artifact \"{}\", which the job does not list; add it to "
                                  "the job's artifacts or fix the name",
                                  text::printable(arg), text::printable(std::string(name))));
        },
        [] {});
    if (!ok) return ok;
  }
  return {};
}

Result<std::vector<std::string>> substitute_artifacts(const std::vector<std::string>& args,
                                                      const std::vector<ArtifactRef>& artifacts,
                                                      const std::string& artifacts_dir) {
  if (auto ok = check_job_artifacts(args, artifacts); !ok) return tl::unexpected(ok.error());
  std::vector<std::string> out;
  out.reserve(args.size());
  for (const std::string& arg : args) {
    std::string replaced;
    auto ok = scan(
        arg, [&](std::string_view text) { replaced += text; },
        [&](std::string_view name) -> Status {
          replaced += artifacts_dir + "/" + std::string(name);
          return {};
        },
        [&] { replaced += artifacts_dir; });
    KILN_ASSERT(ok.has_value(), "check_job_artifacts accepted these args");
    out.push_back(std::move(replaced));
  }
  return out;
}

}  // namespace kiln::protocol
