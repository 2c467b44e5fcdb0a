#include "coordinator/server/server.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/clock.h"
#include "common/http/loop_question.h"
#include "common/http/server.h"
#include "common/logging.h"
#include "common/metrics/exposition.h"
#include "common/metrics/process_metrics.h"
#include "common/process/open_files.h"
#include "common/protocol/roles.h"
#include "common/transport/zmq_transport.h"
#include "coordinator/core/coordinator_core.h"
#include "coordinator/metrics/fleet_metrics.h"
#include "coordinator/server/action_interpreter.h"
#include "coordinator/server/artifact_store.h"
#include "coordinator/server/coordinator_sockets.h"
#include "coordinator/server/environments_watcher.h"
#include "coordinator/server/standby.h"
#include "coordinator/server/group_commit.h"
#include "coordinator/store/store.h"

namespace kiln::coordinator {
namespace {

constexpr int kMaxPollWaitMs = 200;  // also how quickly a stop request is noticed
// A turn of the loop this much later than its poll's wait is a stall (docs/operations.md).
constexpr TimeMs kStalledTurnMs = 1000;
constexpr int kMaxMessagesPerTurn = 1000;
// How often a coordinator on a shared store checks that it still leads it.
constexpr TimeMs kLeadCheckIntervalMs = 1000;
// How long a scrape waits for the loop to render /metrics: under Prometheus's default scrape
// timeout (10 s), so a busy loop shows as a 503 with its reason rather than a timeout.
constexpr auto kMetricsAnswerTimeout = std::chrono::seconds(5);

// The core's deadlines run on the monotonic clock; the wall clock is only for what people read.
Now clocks_now() {
  const TimeMs wall_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return Now{monotonic_clock_ms(), wall_ms};
}

class Server final : public CoordinatorServer, private CoordinatorIo {
 public:
  Server(CoordinatorConfig config, KeyPair keys, std::unique_ptr<Store> store, std::optional<ArtifactStore> artifacts,
         Snapshot snapshot, std::shared_ptr<spdlog::logger> logger)
      : config_(std::move(config)),
        keys_(std::move(keys)),
        store_(std::move(store)),
        batch_(*store_),
        artifacts_(std::move(artifacts)),
        logger_(std::move(logger)),
        start_(clocks_now()),
        core_(config_.knobs, std::move(snapshot), start_, config_.waiver_register),
        clock_(start_) {
    limits_.max_message_bytes = config_.max_message_bytes;
    if (!config_.environments_repo.empty()) {
      watcher_ = std::make_unique<EnvironmentsWatcher>(config_.environments_repo, config_.environments_branch,
                                                       config_.environments_poll_interval_ms);
    }
  }

  Status bind() {
    if (auto s = bind_sockets(sockets_, config_, keys_); !s) return s;
    logger_->info("listening for agents on {} and clients on {} ({} authorized keys)", config_.agent_endpoint,
                  config_.client_endpoint, config_.authorized_keys.size());
    logger_->info("keeping what it acknowledges in the {}", store_description(config_));
    return {};
  }

  // /metrics, when [http] listen is set. The gauges are the core's state, which only this loop's
  // thread may read: the HTTP thread asks the loop (LoopQuestion) and the loop renders between two
  // messages, so a scrape sees the state as it is, never a copy up to a second old, and costs
  // nothing while nobody scrapes.
  Status serve_metrics() {
    if (config_.http_listen.empty()) return {};
    auto audit = quarantine_audit_lines();
    if (!audit) return tl::unexpected(audit.error());
    metrics_.emplace(core_.jobs(), core_.leases(), quarantine_times(*audit));
    auto server = http::serve_loop_page(config_.http_listen, "/metrics", question_, std::string(metrics::kContentType),
                                        metrics::process_metrics_text, "the coordinator's loop", kMetricsAnswerTimeout,
                                        config_.source_path);
    if (!server) return tl::unexpected(server.error());
    http_ = std::move(*server);
    logger_->info("serving /metrics on http://{}/metrics", http_->address());
    return {};
  }

  Status run(const std::atomic<bool>& stop) override {
    if (auto s = carry_out_actions(); !s) return s;
    if (auto s = commit(); !s) return s;
    TimeMs last_tick_ms = monotonic_clock_ms();
    while (!stop.load()) {
      const TimeMs now = monotonic_clock_ms();
      int wait_ms = kMaxPollWaitMs;
      if (auto deadline = core_.next_deadline()) {
        wait_ms = static_cast<int>(std::clamp<TimeMs>(*deadline - now, 0, kMaxPollWaitMs));
      }
      zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                                 {agents_.handle(), 0, ZMQ_POLLIN, 0},
                                 {clients_.handle(), 0, ZMQ_POLLIN, 0},
                                 {nullptr, question_.wake_fd(), ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 4, std::chrono::milliseconds(wait_ms));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return fail(Errc::io, fmt::format("poll failed: {}", e.what()));
      }
      if (items[0].revents & ZMQ_POLLIN) answer_zap(sockets_, config_, *logger_);
      // Clients first: a person or a pipeline waits on each request, while an agent's heartbeat
      // has its whole liveness window; a request read after a turn's worth of heartbeats would
      // wait for all of them.
      if (items[2].revents & ZMQ_POLLIN) {
        if (auto s = receive_all(clients_, false); !s) return s;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        if (auto s = receive_all(agents_, true); !s) return s;
      }
      take_environments();
      // From one tick to the next takes a poll's wait and a little work; far longer and the
      // process was stopped, starved or buried in a backlog, and the agents' silence meanwhile
      // is not theirs: the core must not lose them for it.
      if (const TimeMs late_ms = monotonic_clock_ms() - last_tick_ms - wait_ms; late_ms > kStalledTurnMs) {
        core_.on_resumed(clocks_now(), late_ms);
      }
      core_.on_tick(clocks_now());
      last_tick_ms = monotonic_clock_ms();
      if (auto s = confirm_lead(last_tick_ms); !s) return s;
      if (auto s = carry_out_actions(); !s) return s;
      // The turn's writes in one transaction; what was acknowledged after them goes out now.
      if (auto s = commit(); !s) return s;
      if (items[3].revents & ZMQ_POLLIN) question_.answer_pending([this] { return metrics_->render(core_); });
    }
    logger_->info("stopping");
    return {};
  }

 private:
  Status receive_all(zmq::socket_t& socket, bool from_agents) {
    for (int i = 0; i < kMaxMessagesPerTurn; ++i) {
      auto received = transport::receive(socket, true);
      if (!received) {
        if (received.error().code == Errc::unavailable) break;
        logger_->warn("dropped a message: {}", received.error().message);
        continue;
      }
      if (received->delimited) {
        req_peers_.insert(received->routing_id);
      } else {
        req_peers_.erase(received->routing_id);
      }
      handle_message(*received, from_agents);
      if (auto s = carry_out_actions(); !s) return s;
    }
    return {};
  }

  void handle_message(const transport::Received& r, bool from_agents) {
    const AuthorizedKey& key = authorized_key_of(config_, r.user_id);
    const Caller caller{key.name, key.role};
    auto envelope = admit_message(ReceivedFrames{r.routing_id, from_agents, caller.key_name, r.header, r.body},
                                  limits_, *this);
    if (!envelope) return;
    if (!from_agents && metrics_) {
      metrics_->client_request_taken(r.routing_id, envelope->header.id, envelope->header.type, monotonic_clock_us());
    }
    if (serve_artifact(r, caller, *envelope, from_agents)) return;
    if (serve_audit(r, caller, *envelope, from_agents)) return;
    // Nothing a peer sends may stop the coordinator: the agent would resend the same result to
    // the restarted one, which would stop again. The core validates what it reads, so this
    // only catches a bug; the message is dropped with an error reply and the loop goes on.
    try {
      if (from_agents) {
        core_.on_agent_message(r.routing_id, caller, *envelope, clocks_now());
      } else {
        core_.on_client_message(r.routing_id, caller, *envelope, clocks_now());
      }
    } catch (const std::exception& e) {
      logger_->error("internal error handling {} from {}: {}; the message was dropped (please report this with "
                     "the coordinator's log)",
                     envelope->header.type, caller.key_name, e.what());
      protocol::ErrorReply reply{std::string(to_string(Errc::internal)),
                                 fmt::format("the coordinator could not handle this {} message ({}); it was dropped "
                                             "and the coordinator's log has the details",
                                             envelope->header.type, e.what()),
                                 {}};
      send_to(from_agents ? agents_ : clients_, r.routing_id, std::move(reply), envelope->header.id);
    }
  }

  // Artifact bytes are files, not state of the core: put_artifact and get_artifact are answered
  // here. Returns whether the message was one of them.
  bool serve_artifact(const transport::Received& r, const Caller& caller, const protocol::Envelope& m,
                      bool from_agents) {
    const bool put = std::holds_alternative<protocol::PutArtifact>(m.body);
    const bool get = std::holds_alternative<protocol::GetArtifact>(m.body);
    if (!put && !get) return false;
    zmq::socket_t& socket = from_agents ? agents_ : clients_;
    const auto refuse = [&](Errc code, std::string why) {
      send_to(socket, r.routing_id, protocol::ErrorReply{std::string(to_string(code)), std::move(why), {}}, m.header.id);
    };
    if (put != !from_agents) {
      refuse(Errc::bad_message, fmt::format("'{}' is sent by {} only", m.header.type, put ? "clients" : "agents"));
      return true;
    }
    if (!artifacts_) {
      refuse(Errc::unavailable, "this coordinator keeps no artifacts (its database is in memory and no artifact_dir "
                                "is set); set artifact_dir in its config, or use a shared mount");
      return true;
    }
    if (put) {
      if (!protocol::role_may_put_artifact(caller.role)) {
        refuse(Errc::unauthorized, fmt::format("role {} may not upload artifacts; CI, ops and admin keys do",
                                               protocol::enum_name(caller.role)));
        return true;
      }
      const auto& piece = std::get<protocol::PutArtifact>(m.body);
      auto progress = artifacts_->put(piece);
      if (!progress) {
        logger_->warn("artifact {} from {}: {}", piece.sha256, caller.key_name, progress.error().message);
        refuse(progress.error().code, progress.error().message);
        return true;
      }
      if (progress->complete && piece.offset + piece.data.size() == piece.size_bytes && !piece.data.empty()) {
        logger_->info("stored artifact {} ({} bytes) from {}", piece.sha256, piece.size_bytes, caller.key_name);
      }
      send_to(socket, r.routing_id, std::move(*progress), m.header.id);
      return true;
    }
    // What fits in one reply: the bytes and room for the rest of the message.
    constexpr std::size_t kReplyOverheadBytes = 1024;
    auto chunk = artifacts_->get(std::get<protocol::GetArtifact>(m.body), limits_.max_message_bytes - kReplyOverheadBytes);
    if (!chunk) {
      refuse(chunk.error().code, chunk.error().message);
      return true;
    }
    send_to(socket, r.routing_id, std::move(*chunk), m.header.id);
    return true;
  }

  // The audit log is read from the store, where it is kept whole (the core keeps none of it):
  // list_audit is answered here. Returns whether the message was one.
  bool serve_audit(const transport::Received& r, const Caller& caller, const protocol::Envelope& m, bool from_agents) {
    const auto* query = std::get_if<protocol::ListAudit>(&m.body);
    if (query == nullptr) return false;
    zmq::socket_t& socket = from_agents ? agents_ : clients_;
    const auto refuse = [&](Errc code, std::string why) {
      send_to(socket, r.routing_id, protocol::ErrorReply{std::string(to_string(code)), std::move(why), {}}, m.header.id);
    };
    if (from_agents) {
      refuse(Errc::bad_message, "'list_audit' is sent by clients only");
      return true;
    }
    if (!protocol::role_may_read_audit(caller.role)) {
      refuse(Errc::unauthorized, fmt::format("role {} may not read the audit log; ops and admin keys do",
                                             protocol::enum_name(caller.role)));
      return true;
    }
    protocol::ListAudit one_more = *query;
    one_more.limit = query->limit + 1;
    auto lines = store_->read_audit(one_more);
    if (!lines) {
      logger_->error("list_audit from {}: {}", caller.key_name, lines.error().message);
      refuse(lines.error().code, lines.error().message);
      return true;
    }
    // Half the message limit leaves room for the encoding; the client asks again for the rest.
    const std::size_t budget_bytes = limits_.max_message_bytes / 2;
    protocol::AuditList list;
    std::size_t bytes = 0;
    for (auto& line : *lines) {
      bytes += line.actor.size() + line.role.size() + line.action.size() + line.subject.size() + line.detail.size() + 64;
      if (list.entries.size() == query->limit || bytes > budget_bytes) {
        list.more = true;
        break;
      }
      list.entries.push_back(std::move(line));
    }
    send_to(socket, r.routing_id, std::move(list), m.header.id);
    return true;
  }

  // ---- CoordinatorIo: what the core's actions do here

  void send_to_agent(const std::string& peer, protocol::Body body, std::uint64_t corr) override {
    send_to(agents_, peer, std::move(body), corr);
  }
  void send_to_client(const std::string& client, protocol::Body body, std::uint64_t corr) override {
    send_to(clients_, client, std::move(body), corr);
  }
  Status save_node(const NodeRecord& node) override {
    if (auto s = batch_.before_write(); !s) return s;
    return store_->save_node(node);
  }
  Status save_job(const JobRecord& job) override {
    if (auto s = batch_.before_write(); !s) return s;
    auto saved = store_->save_job(job);
    if (saved && metrics_) metrics_->job_saved(job, clock_.advance(clocks_now()));
    return saved;
  }
  Status save_record(const protocol::RecordEntry& record) override {
    if (auto s = batch_.before_write(); !s) return s;
    return store_->save_record(record);
  }
  Status save_lease(const LeaseRecord& lease) override {
    if (auto s = batch_.before_write(); !s) return s;
    auto saved = store_->save_lease(lease);
    if (saved && metrics_) metrics_->lease_saved(lease, clock_.advance(clocks_now()));
    return saved;
  }
  Status append_audit(const protocol::AuditEntry& entry) override {
    if (auto s = batch_.before_write(); !s) return s;
    auto appended = store_->append_audit(entry);
    if (appended && metrics_) metrics_->audited(entry);
    return appended;
  }
  Result<std::optional<JobRecord>> recall_job(std::uint64_t job_id) override { return store_->load_job(job_id); }
  Result<std::vector<protocol::RecordEntry>> read_records(
      const std::variant<protocol::GetRecord, protocol::ListRecords>& query) override {
    if (const auto* get = std::get_if<protocol::GetRecord>(&query)) {
      auto found = store_->load_record(get->kind, get->key);
      if (!found) return tl::unexpected(found.error());
      if (!*found) return std::vector<protocol::RecordEntry>{};
      return std::vector<protocol::RecordEntry>{std::move(**found)};
    }
    return store_->list_records(std::get<protocol::ListRecords>(query));
  }

  // The audit lines that may say when the nodes quarantined now were quarantined: those since the
  // oldest start of their flapping windows (each quarantine is at or after its window's start).
  Result<std::vector<protocol::AuditEntry>> quarantine_audit_lines() {
    std::optional<TimeMs> since_ms;
    for (const auto& [id, node] : core_.nodes()) {
      if (node.summary.state != protocol::NodeState::quarantined) continue;
      since_ms = std::min(since_ms.value_or(node.flap_window_start_ms), node.flap_window_start_ms);
    }
    std::vector<protocol::AuditEntry> lines;
    if (!since_ms) return lines;
    // The core's clock and the wall clock may differ by a step of the system clock: a minute's slack.
    protocol::ListAudit query{std::max<TimeMs>(0, *since_ms - kMinuteMs), 0, 10000};
    for (;;) {
      auto page = store_->read_audit(query);
      if (!page) return tl::unexpected(page.error());
      if (page->empty()) return lines;
      query.after_seq = page->back().seq;
      for (auto& line : *page) {
        if (line.action == "quarantined") lines.push_back(std::move(line));
      }
    }
  }
  void log(action::Severity severity, const std::string& text) override {
    logger_->log(spdlog_level(severity), "{}", text);
  }

  // Every message goes out through the group commit: after the writes made before it are durable.
  void send_to(zmq::socket_t& socket, const std::string& peer, protocol::Body body, std::uint64_t corr) {
    batch_.send([this, &socket, peer, body = std::move(body), corr]() mutable {
      send_now(socket, peer, std::move(body), corr);
    });
  }

  void send_now(zmq::socket_t& socket, const std::string& peer, protocol::Body body, std::uint64_t corr) {
    auto envelope = protocol::make_envelope(std::move(body), next_message_id_++, corr);
    const bool delimited = req_peers_.count(peer) != 0;
    auto s = transport::send_envelope(socket, &peer, envelope, limits_, delimited);
    if (!s && s.error().code == Errc::too_large) {
      // The peer is waiting for an answer: tell it why there is none.
      logger_->warn("reply {} is too large: {}", envelope.header.type, s.error().message);
      auto error = protocol::make_envelope(
          protocol::ErrorReply{std::string(to_string(Errc::too_large)),
                               s.error().message + "; ask for less (for example a smaller --limit)", {}},
          next_message_id_++, corr);
      s = transport::send_envelope(socket, &peer, error, limits_, delimited);
    }
    if (!s) {
      logger_->warn("could not send {} to a {}: {}", envelope.header.type, &socket == &agents_ ? "node" : "client",
                    s.error().message);
    }
    if (&socket == &clients_ && metrics_) metrics_->client_answer_sent(peer, corr, monotonic_clock_us());
  }

  Status carry_out_actions() {
    auto status = coordinator::carry_out_actions(core_, *this);
    if (!status) {
      logger_->critical("the store failed: {}; stopping so that nothing unsaved is acknowledged",
                        status.error().message);
    }
    return status;
  }

  // A coordinator that lost its store's leadership (its connection dropped: a standby may lead
  // now) must not answer anything more from what it holds.
  Status confirm_lead(TimeMs now_ms) {
    if (!store_->shared() || now_ms < next_lead_check_ms_) return {};
    next_lead_check_ms_ = now_ms + kLeadCheckIntervalMs;
    auto held = store_->confirm_lead();
    if (!held) logger_->critical("{}; stopping so that a standby can serve", held.error().message);
    return held;
  }

  Status commit() {
    // Only a turn that wrote commits anything: the others read no clock.
    const bool timed = batch_.writing() && metrics_;
    const std::int64_t started_us = timed ? monotonic_clock_us() : 0;
    auto status = batch_.commit();
    if (status && timed) metrics_->store_committed(monotonic_clock_us() - started_us);
    if (!status) {
      logger_->critical("the store could not commit the writes of a turn: {}; stopping with their "
                        "acknowledgements unsent",
                        status.error().message);
    }
    return status;
  }

  // The newest reading of the environments repository, with the firmware packages' sizes from
  // the artifact store, goes to the core when it differs from the last one given.
  void take_environments() {
    if (!watcher_) return;
    auto reading = watcher_->take();
    if (!reading) return;
    if (!*reading) {
      if (reading->error().message != environments_problem_) logger_->warn("{}", reading->error().message);
      environments_problem_ = reading->error().message;
      core_.on_environments_problem(environments_problem_);
      return;
    }
    environments_problem_.clear();
    DesiredFleet fleet = std::move(**reading);
    std::string fingerprint = fleet.commit;
    for (DesiredEnvironment& environment : fleet.environments) {
      for (auto [layer, package] : environment.packages()) {
        if (package->sha256.empty() || !environment.blocked.empty()) continue;
        const auto size = artifacts_ ? artifacts_->size_of(package->sha256) : std::nullopt;
        if (size) {
          package->size_bytes = *size;
        } else {
          environment.blocked = fmt::format("{} {} (package sha256:{}) of bundle {} is not in the coordinator's "
                                            "artifact store; upload the package with `kiln artifact upload FILE`",
                                            layer, package->version, package->sha256.substr(0, 12),
                                            environment.bundle_id.substr(0, 12));
        }
      }
      fingerprint += fmt::format("|{}:{}:{}:{}:{}", environment.name, environment.bundle_id,
                                 environment.driver.size_bytes, environment.firmware.size_bytes, environment.blocked);
    }
    if (fingerprint == environments_fingerprint_) {
      core_.on_environments_problem("");
      return;
    }
    environments_fingerprint_ = fingerprint;
    core_.on_desired_environments(std::move(fleet), clocks_now());
  }

  CoordinatorConfig config_;
  KeyPair keys_;
  std::unique_ptr<Store> store_;
  GroupCommit batch_;  // the writes of the current turn, and what waits for them
  std::optional<ArtifactStore> artifacts_;
  std::shared_ptr<spdlog::logger> logger_;
  Now start_;
  CoordinatorCore core_;
  CoreClock clock_;  // the core's clock, as the core reads it: the time of what it saves
  protocol::CodecLimits limits_;
  CoordinatorSockets sockets_;
  zmq::socket_t& zap_ = sockets_.zap;
  zmq::socket_t& agents_ = sockets_.agents;
  zmq::socket_t& clients_ = sockets_.clients;
  std::uint64_t next_message_id_ = 1;
  TimeMs next_lead_check_ms_ = 0;
  std::set<std::string> req_peers_;  // REQ clients, whose replies need an empty delimiter frame
  std::unique_ptr<EnvironmentsWatcher> watcher_;
  std::string environments_problem_;
  std::string environments_fingerprint_;
  std::optional<FleetMetrics> metrics_;
  http::LoopQuestion question_;
  // Last: stopped first, so no scrape waits on a loop that is gone.
  std::unique_ptr<http::Server> http_;
};

// Files the coordinator holds besides its agents' connections: the store, the clients, the
// HTTP server's connections, artifacts being written.
constexpr std::uint64_t kFilesBesideAgents = 200;
// Below this many files, the fleet the coordinator can hold is worth a warning.
constexpr std::uint64_t kFilesForALargeFleet = 16384;

// Every agent's connection is a file: how many the limit leaves room for, and how to make room
// for more when it is low (docs/operations.md, "Sizing").
void say_open_files(const Result<OpenFilesLimit>& files, spdlog::logger& logger) {
  if (!files) {
    logger.warn("{}; the coordinator can hold only as many agents' connections as the limit allows (`ulimit -n` "
                "shows it): raise it where the coordinator is started (docs/operations.md, \"Sizing\")",
                files.error().message);
    return;
  }
  const std::uint64_t agents = files->now > kFilesBesideAgents ? files->now - kFilesBesideAgents : 0;
  const std::string limit = files->now != files->before
                                ? fmt::format("open files: the limit was {}, now {} (its hard limit)", files->before,
                                              files->now)
                                : fmt::format("open files: the limit is {} (its hard limit)", files->now);
  if (files->now < kFilesForALargeFleet) {
    logger.warn("{}: room for about {} agents' connections; for a larger fleet raise the hard limit (LimitNOFILE= in "
                "the systemd unit; the packaged one sets 524288) (docs/operations.md, \"Sizing\")",
                limit, agents);
  } else {
    logger.info("{}: room for about {} agents' connections", limit, agents);
  }
}

}  // namespace

Result<std::unique_ptr<CoordinatorServer>> CoordinatorServer::create(CoordinatorConfig config,
                                                                      const std::atomic<bool>& stop) {
  auto logger = make_logger("coordinator", config.log_level);
  if (!logger) return tl::unexpected(logger.error());
  say_open_files(raise_open_files_limit(), **logger);
  auto keys = load_coordinator_keys(config);
  if (!keys) return tl::unexpected(keys.error());
  auto store = config.store_backend == StoreBackend::postgresql ? open_postgres_store(config.postgres)
                                                                : open_sqlite_store(config.database);
  if (!store) return tl::unexpected(store.error());
  // The snapshot is read only once this coordinator leads: what a leader acknowledged before
  // it died is all in the store by then.
  auto leading = wait_until_leading(**store, config, *keys, **logger, stop);
  if (!leading) return tl::unexpected(leading.error());
  if (!*leading) return std::unique_ptr<CoordinatorServer>();
  if ((*store)->shared()) {
    const auto wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    protocol::AuditEntry line{0,
                              wall_ms,
                              "coordinator",
                              "coordinator",
                              "coordinator_active",
                              coordinator_name(),
                              fmt::format("leads the {}; agents at {}, clients at {}", store_description(config),
                                          config.agent_endpoint, config.client_endpoint)};
    if (auto s = (*store)->append_audit(line); !s) return tl::unexpected(s.error());
  }
  const TimeMs wall_now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
  auto snapshot = (*store)->load_live(config.knobs.ended_jobs_in_memory,
                                      wall_now_ms - config.knobs.quarantine_rerun_window_ms);
  if (!snapshot) return tl::unexpected(snapshot.error());
  std::optional<ArtifactStore> artifacts;
  if (!config.artifact_dir.empty()) {
    auto opened = ArtifactStore::open(config.artifact_dir, config.max_artifact_bytes);
    if (!opened) return tl::unexpected(opened.error());
    artifacts = std::move(*opened);
  }
  auto server = std::make_unique<Server>(std::move(config), std::move(*keys), std::move(*store), std::move(artifacts),
                                         std::move(*snapshot), *logger);
  if (auto s = server->bind(); !s) return tl::unexpected(s.error());
  if (auto s = server->serve_metrics(); !s) return tl::unexpected(s.error());
  return std::unique_ptr<CoordinatorServer>(std::move(server));
}

}  // namespace kiln::coordinator
