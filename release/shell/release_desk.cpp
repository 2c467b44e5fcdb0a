#include "release/shell/release_desk.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "client/records_client.h"
#include "release/shell/forge.h"
#include "release/shell/repository.h"
#include "qualification/shell/lapsed_waivers.h"

namespace kiln::release {

namespace qs = kiln::qualification::shell;
using nlohmann::json;

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return parts;
}

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

// "Key: value" lines of a commit's trailers (git log %(trailers:only,unfold)).
std::multimap<std::string, std::string> parse_trailers(const std::string& text) {
  std::multimap<std::string, std::string> trailers;
  for (const auto& line : split(text, '\n')) {
    const auto colon = line.find(": ");
    if (colon == std::string::npos) continue;
    trailers.emplace(line.substr(0, colon), trimmed(line.substr(colon + 2)));
  }
  return trailers;
}

std::string first(const std::multimap<std::string, std::string>& trailers, const std::string& key) {
  auto it = trailers.find(key);
  return it == trailers.end() ? std::string() : it->second;
}

// A commit-log format whose fields and records cannot be confused with commit text.
constexpr char kField = '\x1f';
constexpr char kRecord = '\x1e';

}  // namespace

Result<Actor> whoami(cli::Client& client) {
  auto reply = cli::expect_reply<protocol::WhoamiReply>(client.request(protocol::Whoami{}));
  if (!reply) return tl::unexpected(reply.error());
  return Actor{reply->key_name, std::string(protocol::enum_name(reply->role))};
}

ReleaseDesk::ReleaseDesk(ReleaseConfig config, cli::Client& client, Actor actor, std::function<TimeMs()> now)
    : config_(std::move(config)), client_(client), actor_(std::move(actor)), now_(std::move(now)),
      git_(config_.repo, actor_.key) {}

Result<std::string> ReleaseDesk::rev(const std::string& name) {
  auto out = git_.check({"rev-parse", "--verify", "-q", name + "^{commit}"});
  if (!out) return tl::unexpected(out.error());
  return trimmed(*out);
}

// The clone is on main, clean, and (with a remote) level with the remote's main.
Status ReleaseDesk::sync() {
  if (!std::filesystem::is_directory(config_.repo)) {
    return fail(Errc::config, fmt::format("the environments clone {} does not exist; clone the repository there or fix "
                                          "[release] repo",
                                          config_.repo));
  }
  auto dirty = git_.check({"status", "--porcelain", "--untracked-files=no"});
  if (!dirty) return tl::unexpected(dirty.error());
  if (!trimmed(*dirty).empty()) {
    return fail(Errc::conflict, fmt::format("the clone {} has uncommitted changes; commit or discard them first "
                                            "(`git -C {} status`)",
                                            config_.repo, config_.repo));
  }
  if (auto ok = git_.check({"checkout", "-q", config_.main_branch}); !ok) return tl::unexpected(ok.error());
  if (config_.remote.empty()) return {};
  if (auto ok = git_.check({"fetch", "-q", "--prune", config_.remote}); !ok) {
    return fail(Errc::unavailable, ok.error().message + "; check [release] remote and that it can be reached");
  }
  auto merged = git_.run({"merge", "-q", "--ff-only", config_.remote + "/" + config_.main_branch});
  if (!merged) return tl::unexpected(merged.error());
  if (merged->exit_code != 0) {
    return fail(Errc::conflict, fmt::format("{}'s {} has commits {}/{} lacks; push them or reset the clone to the "
                                            "remote's (`git -C {} reset --hard {}/{}`)",
                                            config_.repo, config_.main_branch, config_.remote, config_.main_branch,
                                            config_.repo, config_.remote, config_.main_branch));
  }
  return {};
}

Result<Snapshot> ReleaseDesk::snapshot_at(const std::string& rev_name) { return release::snapshot_at(git_, rev_name); }

Result<std::vector<EnvironmentChange>> ReleaseDesk::history_of(const std::string& environment) {
  const std::string path = environment_path(environment);
  auto log = git_.check({"log", "--first-parent", fmt::format("--format=%H%x1f%ct%x1f%an%x1f%P%x1f%(trailers:only,unfold)%x1e"),
                         config_.main_branch, "--", path});
  if (!log) return tl::unexpected(log.error());
  auto bundle_at = [&](const std::string& commit) -> std::string {
    auto text = git_.run({"show", commit + ":" + path});
    if (!text || text->exit_code != 0) return "";  // the file did not exist yet
    auto env = parse_environment_file(text->out, path, environment);
    return env ? env->bundle : std::string();
  };
  std::vector<EnvironmentChange> changes;
  for (const auto& record : split(*log, kRecord)) {
    auto fields = split(trimmed(record), kField);
    if (fields.size() < 5) continue;
    EnvironmentChange change;
    change.commit = fields[0];
    change.committed_at_ms = std::stoll(fields[1]) * 1000;
    const auto parents = split(fields[3], ' ');
    const auto trailers = parse_trailers(fields[4]);
    change.environment = environment;
    change.bundle_id = bundle_at(change.commit);
    change.previous_bundle_id = parents.empty() || parents[0].empty() ? "" : bundle_at(parents[0]);
    if (change.bundle_id == change.previous_bundle_id) continue;  // an edit of something else in the file
    const bool kiln_commit = first(trailers, "Kiln-Environment") == environment;
    change.action = kiln_commit ? first(trailers, "Kiln-Action") : "";
    change.reverts = kiln_commit ? first(trailers, "Kiln-Reverts") : "";
    change.author = first(trailers, "Kiln-Promoted-By");
    if (change.author.empty()) change.author = first(trailers, "Kiln-Rolled-Back-By");
    if (change.author.empty()) change.author = fields[2];
    for (auto [it, end] = trailers.equal_range("Kiln-Approved-By"); it != end; ++it) change.approved_by.push_back(it->second);
    changes.push_back(std::move(change));
  }
  return changes;
}

Result<std::size_t> ReleaseDesk::reconcile() {
  std::set<std::string> recorded;
  std::uint64_t after = 0;
  for (;;) {
    auto list = cli::expect_reply<protocol::RecordList>(
        client_.request(protocol::ListRecords{protocol::RecordKind::promotion, 10000, after}));
    if (!list) return tl::unexpected(list.error());
    for (const auto& record : list->records) {
      recorded.insert(record.key);
      after = std::max(after, record.seq);
    }
    if (!list->more) break;
  }
  auto snapshot = snapshot_at(config_.main_branch);
  if (!snapshot) return tl::unexpected(snapshot.error());
  std::size_t written = 0;
  for (const auto& [name, _] : snapshot->environments) {
    auto history = history_of(name);
    if (!history) return tl::unexpected(history.error());
    for (auto it = history->rbegin(); it != history->rend(); ++it) {  // oldest first
      const std::string key = promotion_record_key(*it);
      if (recorded.contains(key)) continue;
      auto stored = cli::expect_reply<protocol::Ok>(client_.request(
          protocol::PutRecord{protocol::RecordKind::promotion, key, promotion_record_json(*it).dump()}));
      if (!stored) return tl::unexpected(stored.error());
      const std::string action = it->action == "rollback" ? "rollback"
                                 : it->action == "promote" ? "promotion_merged"
                                                           : "environment_changed";
      const std::string approvals =
          it->approved_by.empty() ? "" : fmt::format(", approved by {}", fmt::join(it->approved_by, ", "));
      const std::string detail = fmt::format(
          "{} -> {} in commit {} by {}{}", it->previous_bundle_id.empty() ? "none" : it->previous_bundle_id.substr(0, 12),
          it->bundle_id.empty() ? "none" : it->bundle_id.substr(0, 12), it->commit.substr(0, 12), it->author, approvals);
      if (auto problem = audit(action, "environment " + name, detail); !problem.empty()) return fail(Errc::io, problem);
      ++written;
    }
  }
  return written;
}

std::string ReleaseDesk::audit(const std::string& action, const std::string& subject, const std::string& detail) {
  auto written = cli::expect_reply<protocol::Ok>(client_.request(protocol::PutAudit{action, subject, detail}));
  return written ? std::string() : written.error().message;
}

Result<std::string> ReleaseDesk::commit_with_message(const std::vector<std::string>& commit_args,
                                                     const std::string& message) {
  auto git_dir = git_.check({"rev-parse", "--absolute-git-dir"});
  if (!git_dir) return tl::unexpected(git_dir.error());
  const std::string file = trimmed(*git_dir) + "/KILN_MESSAGE";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << message;
    if (!out) return fail(Errc::internal, fmt::format("cannot write {}", file));
  }
  std::vector<std::string> args = commit_args;
  args.insert(args.end(), {"-F", file});
  auto done = git_.check(args);
  std::filesystem::remove(file);
  if (!done) return tl::unexpected(done.error());
  return rev("HEAD");
}

Status ReleaseDesk::push(const std::string& ref, const std::string& replaced_commit) {
  if (config_.remote.empty()) return {};
  std::vector<std::string> args = {"push", "-q", config_.remote, ref};
  // Replacing a branch only where the remote still has what this clone saw there.
  if (!replaced_commit.empty()) args.insert(args.begin() + 2, fmt::format("--force-with-lease={}:{}", ref, replaced_commit));
  auto pushed = git_.run(args);
  if (!pushed) return tl::unexpected(pushed.error());
  if (pushed->exit_code != 0) {
    return fail(Errc::conflict, fmt::format("{} refused {}: {}", config_.remote, ref, trimmed(pushed->err)));
  }
  return {};
}

// As large as the coordinator stores artifacts by default: a package larger than that could
// not be fetched by digest anyway.
constexpr std::uint64_t kMaxPackageBytes = 4ULL << 30;

Result<BundleAdded> ReleaseDesk::add_bundle(const std::string& bundle_arg,
                                            const std::map<std::string, std::string>& packages,
                                            const std::string& one_way_firmware) {
  if (actor_.role != "ci" && actor_.role != "ops" && actor_.role != "admin") {
    return fail(Errc::unauthorized, fmt::format("role {} may not add bundles to the environments repository; CI, ops "
                                                "and admin keys may",
                                                actor_.role));
  }
  std::vector<std::string> missing;
  for (std::string_view layer : kPinnedLayers) {
    if (!packages.contains(std::string(layer))) missing.emplace_back(layer);
  }
  for (const auto& [layer, path] : packages) {
    if (std::find(std::begin(kPinnedLayers), std::end(kPinnedLayers), layer) == std::end(kPinnedLayers)) {
      return fail(Errc::invalid_argument, fmt::format("--package {}={}: {} is not a layer; the layers are {}", layer,
                                                      path, layer, fmt::join(kPinnedLayers, ", ")));
    }
  }
  if (!missing.empty()) {
    return fail(Errc::invalid_argument, fmt::format("every layer's package is pinned by its digest: add --package "
                                                    "LAYER=FILE for {}",
                                                    fmt::join(missing, ", ")));
  }
  if (auto ok = sync(); !ok) return tl::unexpected(ok.error());
  auto recorded = qs::find_bundle(client_, bundle_arg);
  if (!recorded) return tl::unexpected(recorded.error());
  BundleFile file;
  file.id = recorded->id;
  file.hardware_revisions = recorded->hardware_revisions;
  file.model_configs_version = recorded->model_configs_version;
  file.one_way_firmware = one_way_firmware;
  for (std::string_view layer : kPinnedLayers) {
    const std::string& path = packages.at(std::string(layer));
    auto digest = sha256_of_file(path, kMaxPackageBytes);
    if (!digest) {
      return fail(digest.error().code == Errc::too_large ? Errc::too_large : Errc::invalid_argument,
                  fmt::format("--package {}={}: {}", layer, path, digest.error().message));
    }
    file.layers[std::string(layer)] =
        LayerPin{*recorded->versions.find(*qualification::layer_from_string(layer)), "sha256:" + *digest};
  }
  const std::string text = format_bundle_file(file);
  const std::string path = bundle_path(file.id);
  if (auto held = git_.run({"show", config_.main_branch + ":" + path}); held && held->exit_code == 0) {
    if (held->out == text) return BundleAdded{std::move(file), "", ""};
    return fail(Errc::conflict, fmt::format("{} on {} pins other packages; a bundle's file never changes once "
                                            "added: build a new bundle for new packages",
                                            path, config_.main_branch));
  }
  const std::filesystem::path root(config_.repo);
  std::filesystem::create_directories((root / path).parent_path());
  std::ofstream(root / path, std::ios::binary | std::ios::trunc) << text;
  auto before = rev(config_.main_branch);
  if (!before) return tl::unexpected(before.error());
  if (auto ok = git_.check({"add", path}); !ok) return tl::unexpected(ok.error());
  auto commit = commit_with_message({"commit", "-q"},
                                    fmt::format("Add bundle {}\n\nKiln-Action: add-bundle\nKiln-Bundle: {}\n"
                                                "Kiln-Added-By: {}\n",
                                                file.id.substr(0, 12), file.id, to_string(actor_)));
  if (!commit) {
    (void)git_.run({"reset", "-q", "--hard", *before});
    return tl::unexpected(commit.error());
  }
  if (auto ok = push(config_.main_branch); !ok) {
    (void)git_.run({"reset", "-q", "--hard", *before});
    return fail(Errc::conflict, fmt::format("{}; main moved on the remote meanwhile: run add-bundle again",
                                            ok.error().message));
  }
  const std::string subject = "bundle " + file.id.substr(0, 12);
  const std::string detail =
      fmt::format("{} in commit {}{}", bundle_path(file.id), commit->substr(0, 12),
                  file.one_way_firmware.empty() ? "" : "; one-way firmware: " + file.one_way_firmware);
  std::string problem = audit("bundle_added", subject, detail);
  return BundleAdded{std::move(file), *commit, std::move(problem)};
}

Result<Promoted> ReleaseDesk::promote(const std::string& bundle_arg, const std::string& environment,
                                      const std::string& one_way_override) {
  if (auto ok = sync(); !ok) return tl::unexpected(ok.error());
  if (auto ok = reconcile(); !ok) return tl::unexpected(ok.error());
  auto recorded = qs::find_bundle(client_, bundle_arg);
  if (!recorded) return tl::unexpected(recorded.error());
  auto snapshot = snapshot_at(config_.main_branch);
  if (!snapshot) return tl::unexpected(snapshot.error());
  auto reports = qs::list_runs_of_bundle(client_, recorded->id);
  if (!reports) return tl::unexpected(reports.error());
  // A run passes by the waivers the coordinator holds now, not those its report was recorded with.
  if (auto ok = qs::revoke_lapsed_waivers(client_, *reports, now_()); !ok) return tl::unexpected(ok.error());
  std::vector<GateRun> runs;
  for (const auto& report : *reports) {
    auto run = gate_run_from_json(report);
    if (!run) return tl::unexpected(run.error());
    runs.push_back(std::move(*run));
  }
  std::optional<TimeMs> arrived;
  auto env_it = snapshot->environments.find(environment);
  if (env_it != snapshot->environments.end() && !env_it->second.follows.empty()) {
    auto history = history_of(env_it->second.follows);
    if (!history) return tl::unexpected(history.error());
    arrived = arrived_at_ms(*history, recorded->id);
  }
  RecordedBundle pins{recorded->id, {}, recorded->hardware_revisions};
  for (std::string_view layer : kPinnedLayers) {
    pins.versions[std::string(layer)] = *recorded->versions.find(*qualification::layer_from_string(layer));
  }
  PromotionRequest request{recorded->id, environment, one_way_override, actor_, now_()};
  auto promotion = decide_promotion(*snapshot, request, runs, pins, arrived);
  if (!promotion) return tl::unexpected(promotion.error());

  if (auto ok = previous_rollout_healthy(snapshot->environments.at(environment), promotion->bundle_id); !ok) {
    return tl::unexpected(ok.error());
  }

  const std::string branch = promotion->branch;  // a copy: the promotion is moved into the result below
  auto earlier = superseded_proposal(branch);
  if (!earlier) return tl::unexpected(earlier.error());
  auto env_text = git_.check({"show", config_.main_branch + ":" + environment_path(environment)});
  if (!env_text) return tl::unexpected(env_text.error());
  auto changed = with_bundle(*env_text, promotion->bundle_id);
  if (!changed) return tl::unexpected(changed.error());

  if (auto ok = git_.check({"checkout", "-q", "-B", branch, config_.main_branch}); !ok) return tl::unexpected(ok.error());
  auto write_and_commit = [&]() -> Result<std::string> {
    const std::filesystem::path root(config_.repo);
    const std::string evidence = evidence_path(environment, promotion->bundle_id);
    std::filesystem::create_directories((root / evidence).parent_path());
    std::ofstream(root / environment_path(environment), std::ios::binary | std::ios::trunc) << *changed;
    std::ofstream(root / evidence, std::ios::binary | std::ios::trunc) << evidence_json(*promotion).dump(2) << "\n";
    if (auto ok = git_.check({"add", environment_path(environment), evidence}); !ok) return tl::unexpected(ok.error());
    return commit_with_message({"commit", "-q"}, promotion_message(*promotion));
  };
  auto commit = write_and_commit();
  (void)git_.run({"checkout", "-q", "-f", config_.main_branch});
  if (!commit) {
    (void)git_.run({"branch", "-D", branch});
    return tl::unexpected(commit.error());
  }
  Promoted promoted{std::move(*promotion), *commit, "", "", earlier->commit};
  if (auto ok = push(branch, earlier->remote_commit); !ok) return tl::unexpected(ok.error());
  if (!config_.forge.kind.empty()) {
    PullRequest request{fmt::format("Promote {} to {}", promoted.promotion.bundle_id.substr(0, 12), environment),
                        promotion_message(promoted.promotion), branch, config_.main_branch};
    auto url = open_pull_request(config_.forge, request);
    if (!url) return tl::unexpected(url.error());
    promoted.pull_request_url = *url;
  }
  const Promotion& p = promoted.promotion;
  const std::string subject = "environment " + environment;
  promoted.audit_problem =
      audit("promotion_proposed", subject,
            fmt::format("{} on branch {} (commit {}{})", p.bundle_id.substr(0, 12), branch, promoted.commit.substr(0, 12),
                        earlier->commit.empty() ? "" : ", replacing " + earlier->commit.substr(0, 12)));
  if (!p.one_way_override.empty() && promoted.audit_problem.empty()) {
    promoted.audit_problem = audit("one_way_override", subject,
                                   fmt::format("{} has one-way firmware ({}); promoted anyway: {}",
                                               p.bundle_id.substr(0, 12), p.one_way_firmware, p.one_way_override));
  }
  return promoted;
}

Status ReleaseDesk::previous_rollout_healthy(const EnvironmentFile& environment, const std::string& bundle_id) {
  if (environment.follows.empty()) return {};  // bundles come here from CI: no environment ran it before
  auto rollouts = cli::expect_reply<protocol::EnvironmentList>(client_.request(protocol::ListEnvironments{}));
  if (!rollouts) return tl::unexpected(rollouts.error());
  auto nodes = cli::expect_reply<protocol::NodeList>(client_.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  return check_previous_rollout(environment.name, environment.follows, bundle_id, *rollouts, nodes->nodes);
}

Result<ReleaseDesk::EarlierProposal> ReleaseDesk::superseded_proposal(const std::string& branch) {
  auto main_tip = rev(config_.main_branch);
  if (!main_tip) return tl::unexpected(main_tip.error());
  EarlierProposal earlier;
  // The remote's first: what others approved is there.
  std::vector<std::string> refs;
  if (!config_.remote.empty()) refs.push_back("refs/remotes/" + config_.remote + "/" + branch);
  refs.push_back("refs/heads/" + branch);
  for (const auto& ref : refs) {
    auto tip = rev(ref);
    if (!tip) continue;
    auto merged = git_.run({"merge-base", "--is-ancestor", *tip, config_.main_branch});
    auto base = git_.check({"merge-base", config_.main_branch, *tip});
    const bool in_main = merged && merged->exit_code == 0;
    if (!in_main && base && trimmed(*base) == *main_tip) {
      return fail(Errc::conflict, fmt::format("{} is already proposed on {} (commit {}); approve and merge it "
                                              "(`kiln release approve {}`, `kiln release merge {}`)",
                                              branch.substr(branch.rfind('/') + 1), branch, tip->substr(0, 12), branch,
                                              branch));
    }
    if (earlier.commit.empty()) earlier.commit = *tip;
    if (ref != refs.back()) earlier.remote_commit = *tip;
  }
  return earlier;
}

Result<std::string> ReleaseDesk::resolve_branch(const std::string& target) {
  // A remote promotion branch this clone has not checked out yet is made a local one.
  auto adopt = [&](const std::string& branch) -> Status {
    if (config_.remote.empty()) return {};
    const std::string remote_ref = "refs/remotes/" + config_.remote + "/" + branch;
    auto remote_commit = rev(remote_ref);
    if (!remote_commit) return {};
    auto local_commit = rev("refs/heads/" + branch);
    if (!local_commit) return git_.check({"branch", "-q", branch, remote_ref}).map([](auto&&) {});
    // The local branch stays only while it holds all of the remote's (and perhaps more, not yet
    // pushed); one behind, or one the remote replaced with a new proposal, takes the remote's.
    auto ahead = git_.run({"merge-base", "--is-ancestor", *remote_commit, *local_commit});
    if (ahead && ahead->exit_code == 0) return {};
    return git_.check({"branch", "-q", "-f", branch, remote_ref}).map([](auto&&) {});
  };
  if (target.find('/') != std::string::npos) {
    if (auto ok = adopt(target); !ok) return tl::unexpected(ok.error());
    if (!rev("refs/heads/" + target)) {
      return fail(Errc::not_found, fmt::format("there is no promotion branch {}; `kiln release status` lists the open "
                                               "promotions",
                                               target));
    }
    return target;
  }
  std::vector<std::string> patterns = {"refs/heads/promote/" + target + "/"};
  if (!config_.remote.empty()) patterns.push_back("refs/remotes/" + config_.remote + "/promote/" + target + "/");
  std::set<std::string> open;
  for (const auto& pattern : patterns) {
    auto refs = git_.check({"for-each-ref", "--format=%(refname)", pattern});
    if (!refs) return tl::unexpected(refs.error());
    for (const auto& ref : split(*refs, '\n')) {
      if (ref.empty()) continue;
      const std::string branch = ref.substr(ref.find("promote/"));
      auto merged = git_.run({"merge-base", "--is-ancestor", ref, config_.main_branch});
      if (merged && merged->exit_code == 0) continue;
      open.insert(branch);
    }
  }
  if (open.empty()) {
    return fail(Errc::not_found, fmt::format("no promotion to {} is open; make one with `kiln release promote BUNDLE "
                                             "--to {}`",
                                             target, target));
  }
  if (open.size() > 1) {
    return fail(Errc::conflict, fmt::format("{} promotions to {} are open ({}); name the branch", open.size(), target,
                                            fmt::join(open, ", ")));
  }
  if (auto ok = adopt(*open.begin()); !ok) return tl::unexpected(ok.error());
  return *open.begin();
}

Result<ProposedPromotion> ReleaseDesk::read_proposed(const std::string& branch) {
  ProposedPromotion proposed;
  proposed.branch = branch;
  auto log = git_.check({"log", "--reverse", "--format=%H%x1f%s%x1f%(trailers:only,unfold)%x1e",
                         config_.main_branch + ".." + branch});
  if (!log) return tl::unexpected(log.error());
  bool first_commit = true;
  for (const auto& record : split(*log, kRecord)) {
    auto fields = split(trimmed(record), kField);
    if (fields.size() < 3) continue;
    const auto trailers = parse_trailers(fields[2]);
    if (first_commit) {
      first_commit = false;
      proposed.promotion_subject = fields[1];
      proposed.environment = first(trailers, "Kiln-Environment");
      proposed.bundle_id = first(trailers, "Kiln-Bundle");
      proposed.promoted_by = actor_from_string(first(trailers, "Kiln-Promoted-By"));
      for (const auto& line : split(trimmed(fields[2]), '\n')) {
        if (line.starts_with("Kiln-")) proposed.trailers.push_back(line);
      }
      if (proposed.environment.empty() || first(trailers, "Kiln-Action") != "promote") {
        return fail(Errc::conflict, fmt::format("{}'s first commit is not a promotion (no Kiln-Action: promote and "
                                                "Kiln-Environment trailers); make promotions with `kiln release "
                                                "promote`",
                                                branch));
      }
      continue;
    }
    for (auto [it, end] = trailers.equal_range("Kiln-Approved-By"); it != end; ++it) {
      if (auto approval = actor_from_string(it->second)) proposed.approvals.push_back(*approval);
    }
  }
  proposed.merged = first_commit;  // nothing on the branch that main lacks
  auto base = git_.check({"merge-base", config_.main_branch, branch});
  auto tip = rev(config_.main_branch);
  proposed.based_on_main_tip = base && tip && trimmed(*base) == *tip;
  return proposed;
}

Result<ReleaseDesk::OpenPromotion> ReleaseDesk::open_promotion(const std::string& target) {
  if (auto ok = sync(); !ok) return tl::unexpected(ok.error());
  if (auto ok = reconcile(); !ok) return tl::unexpected(ok.error());
  auto branch = resolve_branch(target);
  if (!branch) return tl::unexpected(branch.error());
  auto proposed = read_proposed(*branch);
  if (!proposed) return tl::unexpected(proposed.error());
  auto snapshot = snapshot_at(config_.main_branch);
  if (!snapshot) return tl::unexpected(snapshot.error());
  auto env = snapshot->environments.find(proposed->environment);
  if (env == snapshot->environments.end()) {
    return fail(Errc::not_found, fmt::format("{} promotes to '{}', which main has no file for", *branch,
                                             proposed->environment));
  }
  return OpenPromotion{*branch, std::move(*proposed), env->second};
}

Result<Approved> ReleaseDesk::approve(const std::string& target) {
  auto open = open_promotion(target);
  if (!open) return tl::unexpected(open.error());
  const std::string& branch = open->branch;
  auto& proposed = open->proposed;
  if (auto ok = decide_approval(proposed, open->environment, actor_); !ok) return tl::unexpected(ok.error());
  if (auto ok = git_.check({"checkout", "-q", branch}); !ok) return tl::unexpected(ok.error());
  auto commit = commit_with_message({"commit", "-q", "--allow-empty"}, approval_message(proposed, actor_));
  (void)git_.run({"checkout", "-q", "-f", config_.main_branch});
  if (!commit) return tl::unexpected(commit.error());
  if (auto ok = push(branch); !ok) return tl::unexpected(ok.error());
  proposed.approvals.push_back(actor_);
  std::string problem = audit("promotion_approved", "environment " + proposed.environment,
                              fmt::format("{} on branch {} (commit {})", proposed.bundle_id.substr(0, 12), branch,
                                          commit->substr(0, 12)));
  return Approved{std::move(proposed), *commit, std::move(problem)};
}

Result<Merged> ReleaseDesk::merge(const std::string& target) {
  auto open = open_promotion(target);
  if (!open) return tl::unexpected(open.error());
  const std::string& branch = open->branch;
  auto& proposed = open->proposed;
  if (auto ok = decide_merge(proposed, open->environment); !ok) return tl::unexpected(ok.error());
  if (auto ok = previous_rollout_healthy(open->environment, proposed.bundle_id); !ok) return tl::unexpected(ok.error());
  auto before = rev(config_.main_branch);
  if (!before) return tl::unexpected(before.error());
  auto commit = commit_with_message({"merge", "-q", "--no-ff", branch}, merge_message(proposed, actor_));
  if (!commit) {
    (void)git_.run({"merge", "--abort"});
    return tl::unexpected(commit.error());
  }
  if (auto ok = push(config_.main_branch); !ok) {
    // Another promotion reached the remote's main first: this merge is undone here.
    (void)git_.run({"reset", "-q", "--hard", *before});
    return fail(Errc::conflict, fmt::format("{}; another change to the environments merged there first: rebase, i.e. "
                                            "make the promotion again on the new main (`kiln release promote {} --to "
                                            "{}`)",
                                            ok.error().message, proposed.bundle_id.substr(0, 12),
                                            proposed.environment));
  }
  Merged merged{std::move(proposed), *commit, ""};
  if (auto recorded = reconcile(); !recorded) merged.record_problem = recorded.error().message;
  return merged;
}

Result<RolledBack> ReleaseDesk::rollback(const std::string& environment) {
  if (auto ok = sync(); !ok) return tl::unexpected(ok.error());
  if (auto ok = reconcile(); !ok) return tl::unexpected(ok.error());
  auto snapshot = snapshot_at(config_.main_branch);
  if (!snapshot) return tl::unexpected(snapshot.error());
  std::vector<EnvironmentChange> history;
  if (snapshot->environments.contains(environment)) {
    auto changes = history_of(environment);
    if (!changes) return tl::unexpected(changes.error());
    history = std::move(*changes);
  }
  auto decided = decide_rollback(*snapshot, environment, history, actor_);
  if (!decided) return tl::unexpected(decided.error());
  auto parents = git_.check({"rev-list", "--parents", "-n", "1", decided->revert_commit});
  if (!parents) return tl::unexpected(parents.error());
  std::vector<std::string> revert = {"revert", "--no-commit"};
  if (split(trimmed(*parents), ' ').size() > 2) revert.insert(revert.end(), {"-m", "1"});
  revert.push_back(decided->revert_commit);
  auto before = rev(config_.main_branch);
  if (!before) return tl::unexpected(before.error());
  if (auto ok = git_.check(revert); !ok) {
    (void)git_.run({"revert", "--abort"});
    return fail(Errc::conflict, fmt::format("{}; the promotion does not revert cleanly: revert it by hand in a reviewed "
                                            "commit",
                                            ok.error().message));
  }
  auto commit = commit_with_message({"commit", "-q"}, rollback_message(*decided, actor_));
  if (!commit) {
    (void)git_.run({"revert", "--abort"});
    return tl::unexpected(commit.error());
  }
  if (auto ok = push(config_.main_branch); !ok) {
    (void)git_.run({"reset", "-q", "--hard", *before});
    return fail(Errc::conflict, fmt::format("{}; main moved on the remote meanwhile: run the rollback again",
                                            ok.error().message));
  }
  RolledBack rolled{std::move(*decided), *commit, ""};
  if (auto recorded = reconcile(); !recorded) rolled.record_problem = recorded.error().message;
  return rolled;
}

Result<ReleaseStatus> ReleaseDesk::status() {
  if (auto ok = sync(); !ok) return tl::unexpected(ok.error());
  ReleaseStatus status;
  // Reading is every role's; recording is for roles that may write records, so a developer's
  // status shows the repository and leaves the records to the next ops or admin command.
  auto recorded = reconcile();
  if (!recorded && recorded.error().code != Errc::unauthorized) return tl::unexpected(recorded.error());
  status.recorded_now = recorded.value_or(0);
  auto tip = rev(config_.main_branch);
  if (!tip) return tl::unexpected(tip.error());
  status.main_commit = *tip;
  auto snapshot = snapshot_at(config_.main_branch);
  if (!snapshot) return tl::unexpected(snapshot.error());
  status.desired = desired_state(*snapshot);
  status.environments = snapshot->environments;
  for (const auto& [name, _] : snapshot->environments) {
    auto branch = resolve_branch(name);
    if (!branch) continue;  // none open, or several: listed below by name
    auto proposed = read_proposed(*branch);
    if (proposed) status.open_promotions.push_back(std::move(*proposed));
  }
  return status;
}

}  // namespace kiln::release
