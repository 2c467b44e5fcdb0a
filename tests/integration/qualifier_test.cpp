// The qualifier as a service, with the real binaries: a run outlives the client that asked for
// it, a qualifier killed with SIGKILL mid-run and started again finishes the run measuring
// nothing twice, two qualifiers never drive the same run, a ticket is a record on the
// coordinator, filed once per culprit and delivered to a webhook that was down, and the nightly
// starts itself once a night.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"
#include "tests/support/loopback_http.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// The history recorded, the bundle at k1 accepted as the baseline; returns the bundle at `at`
// (empty: the latest change).
std::string prepare_bundles(Fleet& fleet, const std::string& at = "") {
  const fs::path dir = fleet.dir();
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (dir / "history.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir", (dir / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);
  std::vector<std::string> build = {"bundle", "build", "--rev", "a", "--bundle-dir", (dir / "bundles").string()};
  if (!at.empty()) build.insert(build.end(), {"--at", at});
  REQUIRE(fleet.kiln("ci", build, &out) == 0);
  return first_word_after(out, "bundle ");
}

// How many jobs measured each config hash (ran to a result: succeeded, or failed with outputs).
std::map<std::string, int> measured_per_config(Fleet& fleet) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"jobs", "--limit", "1000", "--json"}, &out) == 0);
  std::map<std::string, int> measured;
  for (const auto& job : nlohmann::json::parse(out)) {
    const std::string hash = job.at("config_hash");
    if (!hash.empty() && (job.at("state") == "succeeded" || job.at("state") == "failed")) ++measured[hash];
  }
  return measured;
}

// The culprit of each ticket, with its team.
std::map<std::string, std::string> ticketed(Fleet& fleet) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"tickets", "--json"}, &out) == 0);
  std::map<std::string, std::string> team_of;
  for (const auto& ticket : nlohmann::json::parse(out)) team_of[ticket.at("culprit").get<std::string>()] = ticket.at("team");
  return team_of;
}

const std::map<std::string, std::string> kCulprits = {{"k3", "compiler-team"}, {"k5", "kernels-team"}};

}  // namespace

TEST_CASE("killing the client that asked for a nightly changes nothing: the run ends with its verdict and tickets") {
  Fleet fleet("qualifier-client");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet);
  auto client = fleet.start_kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-1"},
                                 fleet.dir() / "client.log");
  std::string out;
  // Killed once the run is under way: its report is recorded and jobs are running.
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"run", "nightly-1"}, &out) == 0 &&
                                         contains(out, "still running") && !measured_per_config(fleet).empty(); },
                            120s));
  client->signal(SIGKILL);
  client->wait(10s);
  CHECK(contains(read(fleet.dir() / "client.log"), "run nightly-1 requested; waiting for its verdict"));

  // Asking again follows the same run to its verdict.
  const int verdict = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-1", "--junit",
                                        (fleet.dir() / "nightly.xml").string()},
                                 &out, 480s);
  INFO(out);
  CHECK(verdict == 1);
  CHECK(contains(read(fleet.dir() / "nightly.xml"), "<failure"));
  CHECK(ticketed(fleet) == kCulprits);
  for (const auto& [hash, count] : measured_per_config(fleet)) CHECK_MESSAGE(count == 1, hash);
  // The same request with other options is refused, naming the run.
  CHECK(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--run-id", "nightly-1", "--repeats", "20"}, &out) == 2);
  CHECK(contains(out, "run nightly-1 was asked for before with other options"));
}

TEST_CASE("a qualifier killed with SIGKILL mid-run and started again finishes the run, each config measured once") {
  Fleet fleet("qualifier-kill");
  // One-node models only: a whole-node lease its killed driver held is not taken up (see
  // docs/qualification.md, Limits).
  start_two_nodes(fleet, {{"model_set", "\"one-node.toml\""}});
  const std::string set(kModelSet);
  write(fleet.dir() / "one-node.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-wide\"")));
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet);
  std::string out;
  REQUIRE(fleet.kiln("ci", {"nightly", "--bundle", candidate, "--run-id", "nightly-2"}, &out) == 0);
  CHECK(contains(out, "run nightly-2 requested; follow it with `kiln run nightly-2`"));
  REQUIRE(Fleet::eventually([&] { return measured_per_config(fleet).size() >= 2; }, 120s));
  fleet.stop_qualifier("qualifier", SIGKILL);
  const std::size_t before = measured_per_config(fleet).size();

  // Started again, it takes the run up once the dead one's claim expires, and its jobs with it.
  fleet.start_qualifier("qualifier");
  const int verdict = fleet.kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-2"}, &out, 480s);
  INFO(out);
  CHECK(verdict == 1);
  const std::string log = fleet.log_of("qualifier");
  CHECK(contains(log, "submitted by this run before: taken up"));
  const auto measured = measured_per_config(fleet);
  CHECK(measured.size() > before);
  for (const auto& [hash, count] : measured) CHECK_MESSAGE(count == 1, hash);
  CHECK(ticketed(fleet) == kCulprits);
  REQUIRE(fleet.kiln("ci", {"run", "nightly-2", "--json"}, &out) == 1);
  CHECK(nlohmann::json::parse(out).at("finished") == true);
}

TEST_CASE("two qualifiers never drive the same run") {
  Fleet fleet("qualifier-two");
  start_two_nodes(fleet, {{"claim_ms", "5000"}}, {"q1", "q2"});
  fleet.start_qualifier("q1");
  fleet.start_qualifier("q2");
  const std::string presubmit = prepare_bundles(fleet, "k2");
  const std::vector<std::string> runs = {"smoke-1", "smoke-2", "smoke-3", "smoke-4"};
  std::string out;
  for (const auto& run_id : runs) REQUIRE(fleet.kiln("ci", {"smoke", "--bundle", presubmit, "--run-id", run_id}, &out) == 0);
  for (const auto& run_id : runs) {
    CAPTURE(run_id);
    CHECK(fleet.kiln("ci", {"smoke", "--bundle", presubmit, "--run-id", run_id, "--wait"}, &out, 240s) == 0);
  }
  const std::string q1 = fleet.log_of("q1");
  const std::string q2 = fleet.log_of("q2");
  for (const auto& run_id : runs) {
    CAPTURE(run_id);
    const bool by_q1 = contains(q1, "drives run " + run_id + "\n");
    const bool by_q2 = contains(q2, "drives run " + run_id + "\n");
    CHECK(by_q1 != by_q2);
  }
  for (const auto& [hash, count] : measured_per_config(fleet)) CHECK_MESSAGE(count == 1, hash);
}

TEST_CASE("a ticket is filed once per culprit, reaches a webhook that answered 503 first, and people acknowledge it") {
  // The receiver is down (503) for the first delivery and takes the second.
  LoopbackServer receiver({503, 200});
  Fleet fleet("qualifier-tickets");
  fleet.add_key("dev", "developer");
  start_two_nodes(fleet, {{"model_set", "\"fp8.toml\""}});
  const std::string set(kModelSet);
  const auto fp8 = set.find("[[model]]\nname = \"mlp-fp8-it\"");
  write(fleet.dir() / "fp8.toml", set.substr(fp8, set.find("[[model]]\nname = \"mlp-fp8-wide\"") - fp8));
  write(fleet.dir() / "webhook.toml", "url = \"" + receiver.url() + "\"\nmax_attempts = 1\ntimeout_ms = 2000\n");
  {
    std::ofstream tickets(fleet.qualifier_config("qualifier"), std::ios::app);  // [tickets] is its last table
    tickets << "webhook_config = \"webhook.toml\"\nretry_backoff_ms = 300\nmax_retry_backoff_ms = 600\n";
  }
  fleet.start_qualifier("qualifier");
  // k3 slows mlp-fp8: the nightly of the bundle at k3 bisects it to k3 and tickets compiler-team.
  const std::string candidate = prepare_bundles(fleet, "k3");
  std::string out;
  const std::vector<std::string> nightly = {"nightly", "--bundle", candidate, "--wait", "--no-accept", "--repeats", "5"};
  auto first = nightly;
  first.insert(first.end(), {"--run-id", "nightly-t1"});
  CHECK(fleet.kiln("ci", first, &out, 240s) == 1);

  const auto tickets = [&fleet] {
    std::string json;
    REQUIRE(fleet.kiln("dev", {"tickets", "--json"}, &json) == 0);
    return nlohmann::json::parse(json);
  };
  REQUIRE(Fleet::eventually([&] { return tickets().at(0).at("sinks").at("webhook").at("delivered") == true; }, 20s));
  auto listed = tickets();
  REQUIRE(listed.size() == 1);
  const std::string id = listed[0].at("id");
  CHECK(listed[0].at("culprit") == "k3");
  CHECK(listed[0].at("team") == "compiler-team");
  CHECK(listed[0].at("run_id") == "nightly-t1");
  CHECK(listed[0].at("state") == "open");
  CHECK(listed[0].at("sinks").at("webhook").at("attempts") == 2);
  const auto posted = receiver.requests();
  REQUIRE(posted.size() == 2);
  CHECK(nlohmann::json::parse(posted[1].body).at("id") == id);
  const std::string log = fleet.log_of("qualifier");
  CHECK(contains(log, "ticket " + id + " not delivered to the webhook sink (attempt 1)"));
  CHECK(contains(log, "ticket " + id + " delivered to the webhook sink (attempt 2)"));

  // Listed by a person's client, which has no ticket directory; acknowledged by that person, not by CI.
  REQUIRE(fleet.kiln("dev", {"tickets"}, &out) == 0);
  std::vector<std::string> row;
  std::istringstream line(out.substr(out.find("\n" + id) + 1));
  for (std::string word; row.size() < 6 && line >> word;) row.push_back(word);
  CHECK(row == std::vector<std::string>{id, "open", "performance_regression", "compiler-team", "k3", "nightly-t1"});
  CHECK(fleet.kiln("ci", {"ticket", "ack", id}, &out) == 3);
  REQUIRE(fleet.kiln("dev", {"ticket", "ack", id}, &out) == 0);
  CHECK(contains(out, "ticket " + id + " is acknowledged"));
  CHECK(fleet.kiln("dev", {"ticket", "duplicate", id, "--of", id}, &out) == 2);

  // A restarted qualifier's next nightly finds the same culprit: the ticket it reports is the
  // same record, acknowledged still, and nothing is sent again.
  fleet.stop_qualifier("qualifier", SIGTERM);
  fleet.start_qualifier("qualifier");
  auto second = nightly;
  second.insert(second.end(), {"--run-id", "nightly-t2"});
  CHECK(fleet.kiln("ci", second, &out, 240s) == 1);
  REQUIRE(fleet.kiln("ci", {"run", "nightly-t2", "--json"}, &out) == 1);
  const auto report = nlohmann::json::parse(out);
  REQUIRE(report.at("tickets").size() == 1);
  CHECK(report.at("tickets").at(0).at("id") == id);
  listed = tickets();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].at("run_id") == "nightly-t1");
  CHECK(listed[0].at("state") == "acknowledged");
  std::this_thread::sleep_for(1s);  // a few of the qualifier's polls
  CHECK(receiver.requests().size() == 2);
}

TEST_CASE("a qualifier whose nightly is due starts exactly one; restarted during the night it starts none") {
  Fleet fleet("qualifier-schedule");
  start_two_nodes(fleet, {{"model_set", "\"bf16.toml\""}});
  const std::string set(kModelSet);
  write(fleet.dir() / "bf16.toml", set.substr(0, set.find("[[model]]\nname = \"mlp-fp8-it\"")));
  const std::string history(kHistory);
  write(fleet.dir() / "k1-k2.toml", history.substr(0, history.find("[[change]]\nid = \"k3\"")));
  std::string out;
  REQUIRE(fleet.kiln("ci", {"change", "import", (fleet.dir() / "k1-k2.toml").string()}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k1", "--rev", "a", "--bundle-dir",
                            (fleet.dir() / "bundles").string()},
                     &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", first_word_after(out, "bundle ")}, &out) == 0);

  // The schedule's clock is put at 00:00:30 UTC of the next night.
  using namespace std::chrono;
  const auto now_ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  const std::int64_t day_ms = 24 * 3600 * 1000;
  const std::int64_t midnight_ms = (now_ms / day_ms + 1) * day_ms;
  const year_month_day night{sys_days{days{midnight_ms / day_ms}}};
  char date[16];
  std::snprintf(date, sizeof date, "%04d-%02u-%02u", static_cast<int>(night.year()),
                static_cast<unsigned>(night.month()), static_cast<unsigned>(night.day()));
  const std::string run_id = std::string("nightly-") + date;
  {
    std::ofstream schedule(fleet.qualifier_config("qualifier"), std::ios::app);
    schedule << "\n[schedule]\nnightly_start = \"00:00\"\nnightly_deadline = \"07:00\"\nrevisions = [\"a\"]\n"
             << "clock_offset_ms = " << (midnight_ms - now_ms + 30000) << "\n";
  }
  fleet.start_qualifier("qualifier");

  const auto report = [&fleet](const std::string& id) {
    std::string json;
    return fleet.kiln("ci", {"run", id, "--json"}, &json) == 0 ? nlohmann::json::parse(json) : nlohmann::json();
  };
  REQUIRE(Fleet::eventually([&] { return report(run_id).value("finished", false); }, 240s));
  const auto finished = report(run_id);
  CHECK(finished.at("tier") == "nightly");
  CHECK(finished.at("passed") == true);
  CHECK(finished.at("met_deadline") == true);
  CHECK(finished.at("deadline_ms").get<std::int64_t>() > now_ms);
  CHECK(contains(finished.at("summary").get<std::string>(), "UTC met"));
  // Its bundle is the one at the latest change.
  REQUIRE(fleet.kiln("ci", {"bundles", "--json"}, &out) == 0);
  bool latest = false;
  for (const auto& bundle : nlohmann::json::parse(out).at("bundles")) {
    if (bundle.at("id") == finished.at("candidate_bundle_id")) latest = bundle.at("changes").size() == 2;
  }
  CHECK(latest);

  // Restarted at the same night, it finds tonight's run asked for and asks for none.
  fleet.stop_qualifier("qualifier", SIGTERM);
  fleet.start_qualifier("qualifier");
  REQUIRE(Fleet::eventually([&] { return contains(fleet.log_of("qualifier"), "starts a nightly every night at 00:00 UTC") &&
                                         fleet.log_of("qualifier").rfind("drives the runs") >
                                             fleet.log_of("qualifier").find("drives the runs"); },
                            20s));
  std::this_thread::sleep_for(2s);  // ten of its polls
  REQUIRE(fleet.kiln("ci", {"runs", "--json"}, &out) == 0);
  const auto runs = nlohmann::json::parse(out);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].at("run_id") == run_id);
  const std::string log = fleet.log_of("qualifier");
  CHECK(log.find("asked for tonight's nightly " + run_id) != std::string::npos);
  CHECK(log.find("asked for tonight's nightly") == log.rfind("asked for tonight's nightly"));
}
