// Tickets and the nightly's calendar with the real binaries: a ticket is a record on the
// coordinator, filed once per culprit across runs and qualifier restarts, delivered to a webhook
// that answered 503 first, listed and acknowledged by a person's client; a qualifier whose
// nightly is due asks for it once, and restarted during the night asks for none.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"
#include "tests/support/loopback_http.h"

using namespace kiln::testing;
using namespace std::chrono_literals;

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
  const Tonight tonight = tonight_starting_now();
  const std::string& run_id = tonight.run_id;
  const std::int64_t now_ms = tonight.now_ms;
  std::ofstream(fleet.qualifier_config("qualifier"), std::ios::app) << "\n" << tonight.schedule_table;
  fleet.start_qualifier("qualifier");

  const auto report = [&fleet](const std::string& id) {
    std::string json;
    return fleet.kiln("ci", {"run", id, "--json"}, &json) == 0 ? nlohmann::json::parse(json) : nlohmann::json::object();
  };
  // A client follows tonight's run before the qualifier has asked for it, to its verdict.
  const auto junit = fleet.dir() / "nightly.xml";
  REQUIRE(fleet.kiln("ci", {"run", run_id, "--wait", "--junit", junit.string()}, &out, 240s) == 0);
  CHECK(contains(out, "kiln nightly " + run_id + ": passed"));
  CHECK(contains(read(junit), "failures=\"0\""));
  const auto finished = report(run_id);
  CHECK(finished.at("tier") == "nightly");
  CHECK(finished.at("passed") == true);
  CHECK(finished.at("met_deadline") == true);
  CHECK(finished.at("deadline_ms").get<std::int64_t>() > now_ms);
  CHECK(contains(finished.at("summary").get<std::string>(), "UTC met"));
  // Its bundle is the one at the latest change.
  REQUIRE(fleet.kiln("ci", {"bundles", "--json"}, &out) == 0);
  // Parsed into a variable: a range-for over a member of a temporary would read freed memory.
  const auto listed = nlohmann::json::parse(out);
  bool latest = false;
  for (const auto& bundle : listed.at("bundles")) {
    if (bundle.at("id") == finished.at("candidate_bundle_id")) latest = bundle.at("change_count") == 2;
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
