// Leases and preemption with the real binaries on loopback: `kiln lease`, `kiln leases`,
// `kiln release-lease`, `kiln queue` and `kiln queue ID`, an experiment preempted by presubmit work
// (the agent forwards the notice to the workload as SIGUSR1; the experiment is requeued),
// watchers that follow a lease across a coordinator restart (`kiln lease watch`), and
// `kiln diag` waiting for a lease on the node's chips.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/protocol/messages.h"
#include "tests/integration/fleet_fixture.h"
#include "tests/integration/fleet_queries.h"
#include "tests/integration/run_command.h"
#include "tests/support/text.h"

using namespace kiln;
using namespace kiln::protocol;
using kiln::testing::ChildProcess;
using kiln::testing::Fleet;
using kiln::testing::job;
using kiln::testing::job_state_is;
using kiln::testing::contains;
using namespace std::chrono_literals;

namespace {

using kiln::testing::read_file;

// The fixture's coordinator config plus a [scheduler] table that makes preemption quick:
// presubmit preempts at once and the grace is 2 s.
std::unique_ptr<ChildProcess> start_coordinator_with_fast_preemption(Fleet& fleet) {
  const auto base = fleet.dir() / "coordinator.toml";
  const auto path = fleet.dir() / "coordinator-fast-preemption.toml";
  std::ofstream(path) << read_file(base)
                      << "\n[scheduler]\ngrace_ms = 2000\n[scheduler.target_start_latency_ms]\npresubmit = 0\n";
  return std::make_unique<ChildProcess>(
      std::vector<std::string>{std::string(KILN_BIN_DIR) + "/kiln-coordinator", "--config", path.string()},
      fleet.dir() / "coordinator.log");
}

// `kiln` with KEY's client config, in the background, its output in OUT.
std::unique_ptr<ChildProcess> kiln_in_background(Fleet& fleet, const std::string& key,
                                                 const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> argv{std::string(KILN_BIN_DIR) + "/kiln", "--config",
                                (fleet.dir() / ("client-" + key + ".toml")).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return std::make_unique<ChildProcess>(argv, fleet.dir() / out);
}

bool node_up(cli::Client& client, const std::string& id) {
  auto reply = client.request(ListNodes{});
  if (!reply) return false;
  for (const auto& n : std::get<NodeList>(*reply).nodes) {
    if (n.node_id == id) return n.state == NodeState::up;
  }
  return false;
}

std::uint64_t submit(cli::Client& client, const std::string& seconds, std::uint32_t chips, PriorityClass cls) {
  SubmitJob s;
  s.workload = "sleep";
  s.args = {seconds};
  s.chips = chips;
  s.priority_class = cls;
  s.timeout_ms = 60000;
  auto reply = client.request(s);
  REQUIRE_MESSAGE(reply.has_value(), reply.error().message);
  return std::get<JobAccepted>(*reply).job_id;
}

}  // namespace

TEST_CASE("kiln lease waits, prints what it got, shows in kiln leases, and ends when released") {
  Fleet fleet("lease");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  auto coordinator = start_coordinator_with_fast_preemption(fleet);
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 10s));

  auto lease = kiln_in_background(fleet, "dev", {"lease", "--chips", "4", "--rev", "a", "--duration", "1h"}, "lease.out");
  REQUIRE(Fleet::eventually([&] { return read_file(fleet.dir() / "lease.out").find("granted") != std::string::npos; },
                            10s));
  const std::string granted = read_file(fleet.dir() / "lease.out");
  CHECK(granted.find("lease L1 granted") != std::string::npos);
  CHECK(granted.find("node n01") != std::string::npos);
  CHECK(granted.find("expires at") != std::string::npos);
  CHECK(granted.find("granted") == granted.rfind("granted"));  // told once, not again by the watch

  std::string out;
  CHECK(fleet.kiln("dev", {"leases"}, &out) == 0);
  CHECK(out.find("L1") != std::string::npos);
  CHECK(out.find("granted") != std::string::npos);
  CHECK(out.find("n01[") != std::string::npos);
  CHECK(fleet.kiln("dev", {"nodes"}, &out) == 0);
  CHECK(out.find("n01") != std::string::npos);

  // The lease still watches; releasing it ends the watching command with exit code 0.
  CHECK(lease->running());
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  const int status = lease->wait(10s);
  REQUIRE(status >= 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_file(fleet.dir() / "lease.out").find("lease L1 ended: released by dev") != std::string::npos);
  CHECK(fleet.kiln("dev", {"leases"}, &out) == 0);
  CHECK(out.find("no leases") != std::string::npos);
  CHECK(fleet.kiln("dev", {"release-lease", "L9"}, &out) == 5);
}

TEST_CASE("an experiment is preempted by presubmit work: notice to the workload, requeued, queue --why explains") {
  Fleet fleet("preempt");
  fleet.add_key("dev", "developer");
  fleet.add_key("ci", "ci");
  fleet.add_agent({"n01", "a"});
  auto coordinator = start_coordinator_with_fast_preemption(fleet);
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  auto ci = fleet.client("ci");
  REQUIRE(Fleet::eventually([&] { return node_up(*dev, "n01"); }, 10s));

  const auto experiment = submit(*dev, "6", 8, PriorityClass::experiment);
  REQUIRE(Fleet::eventually([&] { return job(*dev, experiment)->job.state == JobState::running; }, 10s));

  // A developer lease and another experiment wait behind it, and say why.
  std::string out;
  CHECK(fleet.kiln("dev", {"lease", "--chips", "8", "--duration", "30m", "--no-wait"}, &out) == 0);
  CHECK(out.find("lease L1 pending") != std::string::npos);
  CHECK(fleet.kiln("dev", {"queue", "L1"}, &out) == 0);
  CHECK(out.find("lease L1 is pending") != std::string::npos);
  CHECK(out.find("expected to start at") != std::string::npos);
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  const auto waiting = submit(*dev, "1", 1, PriorityClass::experiment);
  CHECK(fleet.kiln("dev", {"queue", std::to_string(waiting)}, &out) == 0);
  CHECK(out.find("is pending") != std::string::npos);
  CHECK(out.find("free chips") != std::string::npos);
  CHECK(fleet.kiln("dev", {"queue", std::to_string(experiment)}, &out) == 0);
  CHECK(out.find("not pending") != std::string::npos);

  // Presubmit cannot start: the experiment gets notice, its workload is signalled and exits,
  // and it goes back to the queue keeping its age.
  const auto presubmit = submit(*ci, "1", 1, PriorityClass::presubmit);
  REQUIRE(Fleet::eventually([&] { return fleet.log_of("n01").find("preemption notice") != std::string::npos; }, 10s));
  REQUIRE(Fleet::eventually([&] { return job(*ci, presubmit)->job.state == JobState::succeeded; }, 15s));
  CHECK(fleet.log_of("coordinator").find("let go of its chips after the preemption notice") != std::string::npos);
  // Then the experiment runs again, ahead of the younger experiment, and finishes.
  REQUIRE(Fleet::eventually([&] { return job(*dev, experiment)->job.state == JobState::succeeded; }, 20s));
  const auto done = job(*dev, experiment);
  CHECK(done->job.attempt == 2);
  CHECK(fleet.log_of("coordinator").find("attempt 1 preempted on n01") != std::string::npos);
  REQUIRE(Fleet::eventually([&] { return job(*dev, waiting)->job.state == JobState::succeeded; }, 10s));
}

TEST_CASE("a lease and the job running in it survive a coordinator restart; lease ids are not reused") {
  Fleet fleet("lease-restart");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  std::uint64_t job_id = 0;
  std::string before;
  {
    auto client = fleet.client("dev");
    REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 10s));
    std::string out;
    REQUIRE(fleet.kiln("dev", {"lease", "--chips", "4", "--duration", "1h", "--detach"}, &out) == 0);
    CHECK(out.find("lease L1 granted") != std::string::npos);
    SubmitInLease in_lease;
    in_lease.lease_id = 1;
    in_lease.job.workload = "sleep";
    in_lease.job.args = {"4"};
    in_lease.job.chips = 2;
    in_lease.job.timeout_ms = 60000;
    auto reply = client->request(in_lease);
    REQUIRE_MESSAGE(reply.has_value(), reply.error().message);
    job_id = std::get<JobAccepted>(*reply).job_id;
    REQUIRE(Fleet::eventually([&] { return job_state_is(*client, job_id, JobState::running); }, 10s));
    REQUIRE(fleet.kiln("dev", {"leases"}, &before) == 0);
  }
  fleet.stop_coordinator(SIGKILL);
  fleet.start_coordinator();
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 10s));
  std::string after;
  CHECK(fleet.kiln("dev", {"leases"}, &after) == 0);
  CHECK(after.find("L1") != std::string::npos);
  CHECK(after.find("granted") != std::string::npos);
  // The same chips, held again.
  const auto chips_of = [](const std::string& text) { return text.substr(text.find("n01[")); };
  CHECK(chips_of(after).substr(0, chips_of(after).find(']')) == chips_of(before).substr(0, chips_of(before).find(']')));
  // The job in the lease was not cancelled by the restart: it runs to its end.
  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, job_id, JobState::succeeded); }, 15s));
  CHECK(job(*client, job_id).value().job.attempt == 1);
  std::string out;
  CHECK(fleet.kiln("dev", {"lease", "--chips", "1", "--duration", "1h", "--no-wait"}, &out) == 0);
  CHECK(out.find("L2") != std::string::npos);
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
}

TEST_CASE("kiln diag on a node whose 8 chips a developer leases waits for the lease, then runs") {
  Fleet fleet("diaglease");
  fleet.add_key("dev", "developer");
  fleet.add_key("lab1", "lab");
  fleet.add_agent({"n03", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n03");
  auto lab = fleet.client("lab1");
  auto dev = fleet.client("dev");  // also writes the client config kiln_in_background uses
  REQUIRE(Fleet::eventually([&] { return node_up(*lab, "n03"); }, 15s));

  auto lease = kiln_in_background(fleet, "dev", {"lease", "--chips", "8", "--rev", "a", "--duration", "1h"}, "lease.out");
  REQUIRE(Fleet::eventually([&] { return read_file(fleet.dir() / "lease.out").find("granted") != std::string::npos; },
                            15s));
  REQUIRE(read_file(fleet.dir() / "lease.out").find("lease L1 granted") != std::string::npos);

  auto diag = kiln_in_background(fleet, "lab1", {"diag", "n03", "--level", "2"}, "diag.out");
  std::uint64_t diag_job = 0;
  REQUIRE(Fleet::eventually(
      [&] {
        auto reply = lab->request(ListJobs{50, true});
        if (!reply) return false;
        for (const JobSummary& j : std::get<JobList>(*reply).jobs) {
          if (j.workload == kDiagWorkload) diag_job = j.job_id;
        }
        return diag_job != 0;
      },
      15s));
  // docs/health.md: maintenance waits for every lease on the node's chips; it revokes none.
  std::this_thread::sleep_for(2s);
  CHECK(job_state_is(*lab, diag_job, JobState::queued));
  CHECK(diag->running());
  CHECK(lease->running());
  std::string out;
  REQUIRE(fleet.kiln("dev", {"leases"}, &out) == 0);
  CHECK_MESSAGE(out.find("granted") != std::string::npos, out);
  REQUIRE(fleet.kiln("lab1", {"queue", std::to_string(diag_job)}, &out) == 0);
  // It waits for the whole node, which the lease holds until its expiry in an hour at the latest.
  CHECK_MESSAGE(out.find("node n03 needs 1 whole free nodes") != std::string::npos, out);
  CHECK_MESSAGE(out.find("expected to start at") != std::string::npos, out);
  CHECK(read_file(fleet.dir() / "lease.out").find("ended") == std::string::npos);

  // Released by its holder: the diagnostics run on the node and pass.
  REQUIRE(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  const int diag_status = diag->wait(90s);
  REQUIRE(diag_status >= 0);
  CHECK(WIFEXITED(diag_status));
  CHECK_MESSAGE(WEXITSTATUS(diag_status) == 0, read_file(fleet.dir() / "diag.out"));
  CHECK(job_state_is(*lab, diag_job, JobState::succeeded));
  CHECK(read_file(fleet.dir() / "lease.out").find("lease L1 ended: released by dev") != std::string::npos);
}

TEST_CASE("kiln lease and kiln lease watch follow a lease across a coordinator restart and see a later notice") {
  Fleet fleet("lease-watch");
  fleet.add_key("dev", "developer");
  fleet.add_key("other", "developer");
  fleet.add_key("ops1", "ops");
  fleet.add_key("ci", "ci");
  fleet.add_agent({"n01", "a"});
  auto coordinator = start_coordinator_with_fast_preemption(fleet);
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  for (const char* key : {"other", "ops1", "ci"}) (void)fleet.client(key);  // their client configs
  REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 10s));

  auto lease = kiln_in_background(fleet, "dev", {"lease", "--chips", "8", "--duration", "1h"}, "lease.out");
  REQUIRE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / "lease.out"), "lease L1 granted"); }, 10s));
  // From other terminals: the owner with `lease watch`, ops with the `--attach` alias; another
  // developer may not follow it, and a lease that does not exist is not found.
  auto watch = kiln_in_background(fleet, "dev", {"lease", "watch", "L1"}, "watch.out");
  auto attach = kiln_in_background(fleet, "ops1", {"lease", "--attach", "L1"}, "attach.out");
  REQUIRE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / "watch.out"), "lease L1 granted"); }, 10s));
  REQUIRE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / "attach.out"), "lease L1 granted"); }, 10s));
  std::string out;
  CHECK(fleet.kiln("other", {"lease", "watch", "L1"}, &out) == 3);
  CHECK(contains(out, "lease L1 belongs to dev"));
  CHECK(fleet.kiln("dev", {"lease", "watch", "L9"}, &out) == 5);
  CHECK(contains(out, "no lease L9"));

  // The coordinator dies and comes back; the watchers reconnect and keep their lease.
  coordinator->signal(SIGKILL);
  REQUIRE(coordinator->wait(10s) >= 0);
  coordinator = start_coordinator_with_fast_preemption(fleet);
  REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 20s));
  REQUIRE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / "lease.out"), "reconnecting"); }, 10s));
  CHECK(lease->running());
  CHECK(watch->running());
  CHECK(attach->running());

  // Presubmit work needs the chips: the notice, given after the restart, reaches every watcher.
  auto ci = fleet.client("ci");
  const auto presubmit = submit(*ci, "1", 8, PriorityClass::presubmit);
  for (const char* file : {"lease.out", "watch.out", "attach.out"}) {
    REQUIRE_MESSAGE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / file), "PREEMPTION NOTICE for lease L1"); },
                                      20s),
                    read_file(fleet.dir() / file));
  }
  const std::string notice = read_file(fleet.dir() / "watch.out");
  CHECK_MESSAGE(contains(notice, "release the lease in 2s (at "), notice);  // the grace, to the second
  CHECK_FALSE(contains(notice, "281474976710"));
  // At the end of the grace it is queued again; once the presubmit job is done it is granted again.
  REQUIRE(Fleet::eventually([&] { return job_state_is(*ci, presubmit, JobState::succeeded); }, 30s));
  REQUIRE(Fleet::eventually(
      [&] {
        const std::string text = read_file(fleet.dir() / "watch.out");
        return text.find("lease L1 granted") != text.rfind("lease L1 granted");
      },
      20s));
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  for (auto* watcher : {lease.get(), watch.get(), attach.get()}) {
    const int status = watcher->wait(15s);
    REQUIRE(status >= 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (const char* file : {"lease.out", "watch.out", "attach.out"}) {
    const std::string text = read_file(fleet.dir() / file);
    CHECK_MESSAGE(contains(text, "queued again keeping its age"), text);
    CHECK_MESSAGE(contains(text, "lease L1 ended: released by dev"), text);
  }
  // Attaching to a lease that ended says so and exits 0.
  CHECK(fleet.kiln("dev", {"lease", "--attach", "L1"}, &out) == 0);
  CHECK(contains(out, "lease L1 ended: released by dev"));
}

TEST_CASE("kiln submit --wait follows its job across a coordinator restart and exits with its outcome") {
  Fleet fleet("wait-restart");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto client = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_up(*client, "n01"); }, 10s));
  auto waiting = kiln_in_background(fleet, "dev", {"submit", "--workload", "sleep", "--wait", "--", "4"}, "wait.out");
  REQUIRE(Fleet::eventually([&] { return contains(read_file(fleet.dir() / "wait.out"), "job 1: running"); }, 10s));
  fleet.stop_coordinator(SIGKILL);
  fleet.start_coordinator();
  const int status = waiting->wait(60s);
  REQUIRE(status >= 0);
  CHECK(WIFEXITED(status));
  const std::string out = read_file(fleet.dir() / "wait.out");
  // (It reconnects when a poll was in flight; one sent between polls reaches the new coordinator.)
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, out);
  CHECK(contains(out, "job 1: succeeded"));
}

TEST_CASE("kiln queue lists what waits in priority order, with reasons and expected starts, as text and JSON") {
  Fleet fleet("queue-list");
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  auto dev = fleet.client("dev");
  REQUIRE(Fleet::eventually([&] { return node_up(*dev, "n01"); }, 10s));
  std::string out;
  std::string err;
  CHECK(fleet.kiln("dev", {"queue"}, &out) == 0);
  CHECK_MESSAGE(contains(out, "the queue is empty"), out);

  const auto running = submit(*dev, "60", 8, PriorityClass::experiment);
  REQUIRE(Fleet::eventually([&] { return job_state_is(*dev, running, JobState::running); }, 10s));
  REQUIRE(fleet.kiln("dev", {"lease", "--chips", "8", "--duration", "30m", "--no-wait"}, &out) == 0);
  const auto waiting = submit(*dev, "1", 2, PriorityClass::experiment);

  CHECK(fleet.kiln("dev", {"queue"}, &out) == 0);
  CHECK_MESSAGE(contains(out, "WAITING"), out);
  CHECK(contains(out, "EXPECTED START"));
  // The older request first; each with what it waits for, in words.
  const auto lease_at = out.find("  1  L1 ");
  const auto job_at = out.find(fmt::format("  2  job {} ", waiting));
  CHECK_MESSAGE(lease_at != std::string::npos, out);
  CHECK_MESSAGE(job_at != std::string::npos, out);
  CHECK(lease_at < job_at);
  CHECK(contains(out, "       - "));
  CHECK(contains(out, "(in "));
  CHECK_FALSE(contains(out, "request "));  // no internal numbers

  CHECK(fleet.kiln_split("dev", {"--json", "queue"}, &out, &err) == 0);
  auto list = nlohmann::json::parse(out);  // stdout is one JSON document
  REQUIRE(list["entries"].size() == 2);
  CHECK(list["entries"][0]["lease_id"] == 1);
  CHECK(list["entries"][0]["job_id"] == 0);
  CHECK(list["entries"][1]["job_id"] == waiting);
  CHECK(list["entries"][1]["workload"] == "sleep");
  CHECK(list["entries"][1]["chips"] == 2);
  CHECK(list["entries"][1]["owner"] == "dev");
  CHECK(list["entries"][1]["priority_class"] == "experiment");
  CHECK(list["entries"][1]["expected_start_ms"].get<std::uint64_t>() > 0);
  CHECK_FALSE(list["entries"][1]["reasons"].empty());
  CHECK(list["more"] == false);

  CHECK(fleet.kiln("dev", {"queue", "--limit", "1"}, &out) == 0);
  CHECK(contains(out, "  1  L1 "));
  CHECK_FALSE(contains(out, fmt::format("job {} ", waiting)));
  CHECK(contains(out, "--limit shows more"));
  CHECK(fleet.kiln("dev", {"queue", "--limit", "0"}, &out) == 2);
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
  CHECK(fleet.kiln("dev", {"cancel", std::to_string(running)}, &out) == 0);
}

TEST_CASE("a job or lease no node could ever take is refused at submit, exit 2, listing the fleet's revisions") {
  Fleet fleet("never");
  auto client = kiln::testing::start_nodes(fleet, {{"n01", "a"}, {"n02", "b"}});

  std::string out;
  CHECK(fleet.kiln("dev", {"submit", "--workload", "sleep", "--rev", "c"}, &out) == 2);
  CHECK_MESSAGE(out.find("this job could never start: no node has hardware revision 'c'; the fleet has revisions a "
                         "(1 node), b (1 node)") != std::string::npos,
                out);
  CHECK(fleet.kiln("dev", {"lease", "--nodes", "3", "--duration", "1h", "--no-wait"}, &out) == 2);
  CHECK_MESSAGE(out.find("this lease could never be granted: 3 whole nodes of one revision asked for, but the fleet "
                         "has 1 node of any one revision") != std::string::npos,
                out);
  // Two nodes in all, one of each revision: two whole nodes of one revision never come.
  CHECK(fleet.kiln("dev", {"lease", "--nodes", "2", "--duration", "1h", "--no-wait"}, &out) == 2);
  CHECK(fleet.kiln("dev", {"submit", "--workload", "sleep", "--rev", "b", "--node", "n01"}, &out) == 2);
  CHECK_MESSAGE(out.find("node n01 has hardware revision a, not b") != std::string::npos, out);
  // A workload no agent lists in its [workloads].
  CHECK(fleet.kiln("dev", {"submit", "--workload", "bert-large"}, &out) == 2);
  CHECK_MESSAGE(out.find("this job could never start: no agent declares workload 'bert-large'; the agents declare "
                         "model, shell, sleep, smoke") != std::string::npos,
                out);
  // Nothing was queued by the refusals.
  CHECK(fleet.kiln("dev", {"jobs"}, &out) == 0);
  CHECK_MESSAGE(out.find("sleep") == std::string::npos, out);
  CHECK(fleet.kiln("dev", {"leases"}, &out) == 0);
  CHECK_MESSAGE(out.find("L1") == std::string::npos, out);
}

TEST_CASE("a gang in a lease of whole nodes: each rank gets torch.distributed's rendezvous; a failing rank ends the rest") {
  Fleet fleet("gang");
  auto client = kiln::testing::start_nodes(fleet, {{"n01", "a"}, {"n02", "a"}, {"n03", "a"}});
  std::string out;
  REQUIRE(fleet.kiln("dev", {"lease", "--nodes", "3", "--duration", "1h", "--detach"}, &out) == 0);
  REQUIRE_MESSAGE(contains(out, "lease L1 granted"), out);
  // Each rank says what it was told; rank 1 fails after a moment, the others would run on.
  const std::string script =
      "echo \"rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT local=$LOCAL_RANK/$LOCAL_WORLD_SIZE\"; "
      "if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi; sleep 60";
  std::string json_out;
  std::string err;
  REQUIRE(fleet.kiln_split("dev", {"--json", "submit", "--lease", "L1", "--ranks", "3", "--workload", "shell", "--",
                                   "-c", script},
                           &json_out, &err) == 0);
  const auto ids = nlohmann::json::parse(json_out).at("job_ids").get<std::vector<std::uint64_t>>();
  REQUIRE(ids.size() == 3);

  REQUIRE(Fleet::eventually([&] { return job_state_is(*client, ids[1], JobState::failed); }, 20s));
  REQUIRE(Fleet::eventually(
      [&] {
        return job_state_is(*client, ids[0], JobState::cancelled) && job_state_is(*client, ids[2], JobState::cancelled);
      },
      20s));
  const std::string master = fmt::format("master=127.0.0.1:{}", 29500 + ids[0] % 1000);
  std::set<std::string> nodes;
  for (std::size_t rank = 0; rank < ids.size(); ++rank) {
    const auto detail = job(*client, ids[rank]).value();
    nodes.insert(detail.job.node_id);
    CHECK(detail.job.gang_id == ids[0]);
    CHECK(detail.job.gang_rank == rank);
    CHECK(detail.job.gang_size == 3);
    CHECK_MESSAGE(contains(detail.output_tail, fmt::format("rank={} world=3 {} local=0/1", rank, master)),
                  detail.output_tail);
    if (rank != 1) {
      CHECK_MESSAGE(contains(detail.job.detail, fmt::format("rank 1 of its gang (job {}) ended failed", ids[1])),
                    detail.job.detail);
    }
  }
  CHECK(nodes.size() == 3);
  CHECK(job(*client, ids[1]).value().job.exit_code == 3);
  CHECK(fleet.kiln("dev", {"result", std::to_string(ids[2])}, &out) == 1);
  CHECK_MESSAGE(contains(out, fmt::format("gang       rank 2 of 3 (jobs {} to {})", ids[0], ids[2])), out);
  CHECK(fleet.kiln("dev", {"release-lease", "L1"}, &out) == 0);
}
