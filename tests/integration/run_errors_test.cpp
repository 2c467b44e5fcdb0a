// A run that cannot be carried out is not a regression, and never hangs: with the real qualifier,
// each request that cannot be carried out is refused when asked (exit 2, naming what is wrong),
// and a request that gets past the client is refused by the qualifier once, recorded with the
// error verdict, so the client waiting for it ends with exit 2 and the reason; `kiln runs` and the
// qualifier's metrics say error, not failed. `kiln run cancel` stops a run and its jobs.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/http/client.h"
#include "client/records_client.h"
#include "tests/integration/qualification_fleet.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

// Asks for the run as a client that skips kiln's own checks would: the request goes straight to
// the coordinator's records, for the qualifier to take up.
void request_past_the_client(Fleet& fleet, const std::string& run_id, const std::string& bundle,
                             const std::string& change = "") {
  auto client = fleet.client("ci");
  REQUIRE(client);
  q::RunRequest request;
  request.run_id = run_id;
  request.tier = q::Tier::smoke;
  request.bundle_id = bundle;
  request.change = change;
  request.max_models = 4;
  REQUIRE(qs::request_run(*client, request));
}

// The VERDICT column of `kiln runs` for the run.
std::string listed_verdict(Fleet& fleet, const std::string& run_id) {
  std::string out;
  REQUIRE(fleet.kiln("ci", {"runs"}, &out) == 0);
  const auto at = out.find(run_id + " ");
  if (at == std::string::npos) return "";
  std::string line = out.substr(at, out.find('\n', at) - at);
  line.erase(line.find_last_not_of(' ') + 1);  // the column is padded
  return line.substr(line.find_last_of(' ') + 1);
}

std::string bundle_dir(Fleet& fleet) { return (fleet.dir() / "bundles").string(); }

}  // namespace

TEST_CASE("a smoke of a bundle older than the accepted baseline is refused, never waited for forever") {
  Fleet fleet("errors-older");
  const std::string metrics_address = Fleet::free_loopback_address();
  fleet.add_qualifier("qualifier", {}, "[http]\nlisten = \"" + metrics_address + "\"\n");
  start_two_nodes(fleet, {}, {});
  fleet.start_qualifier("qualifier");
  const std::string latest = prepare_bundles(fleet);
  std::string out;
  REQUIRE(fleet.kiln("ci", {"bundle", "accept", latest}, &out) == 0);
  REQUIRE(fleet.kiln("ci", {"bundle", "build", "--at", "k2", "--rev", "a", "--bundle-dir", bundle_dir(fleet)}, &out) ==
          0);
  const std::string older = first_word_after(out, "bundle ");

  // Asked with kiln: refused at once, naming both bundles; no run is requested.
  CHECK(fleet.kiln("ci", {"smoke", "--bundle", older, "--wait", "--run-id", "smoke-old"}, &out, 60s) == 2);
  CHECK(contains(out, "bundle " + older.substr(0, 12) + " (changes up to k2) is older than the accepted baseline " +
                          latest.substr(0, 12) + " of revision a"));
  CHECK(fleet.kiln("ci", {"run", "smoke-old"}, &out) == 5);

  // Asked past kiln's check: the qualifier refuses it once and records why; the waiting client
  // ends with exit 2 and the reason.
  request_past_the_client(fleet, "smoke-old-2", older);
  const int waited = fleet.kiln("ci", {"run", "smoke-old-2", "--wait"}, &out, 120s);
  INFO(out);
  CHECK(waited == 2);
  CHECK(contains(out, "kiln smoke smoke-old-2: ERROR"));
  CHECK(contains(out, "could not be carried out, which says nothing of the bundle: cannot run: bundle " +
                          older.substr(0, 12) + " (changes up to k2) is older than the accepted baseline"));
  // Several polls later it was still taken up only once.
  std::this_thread::sleep_for(3s);
  const std::string log = fleet.log_of("qualifier");
  CHECK(count_of(log, "drives run smoke-old-2\n") == 1);
  CHECK(listed_verdict(fleet, "smoke-old-2") == "error");
  // The run that could not be carried out has its page like any other, saying so.
  const std::filesystem::path html = fleet.dir() / "smoke-old-2.html";
  CHECK(fleet.kiln("ci", {"run", "smoke-old-2", "--html", html.string()}, &out) == 2);
  CHECK(contains(read(html), "older than the accepted baseline"));
  std::string page;
  CHECK(Fleet::eventually([&] {
    page = kiln::http::get(metrics_address, "/metrics").body;
    return contains(page, "kiln_runs_total{kind=\"smoke\",verdict=\"error\"} 1\n");
  }, 20s));
  CHECK(contains(page, "kiln_runs_total{kind=\"smoke\",verdict=\"failed\"} 0\n"));
}

TEST_CASE("a smoke of a change that is not recorded is refused when asked, and by the qualifier past kiln") {
  Fleet fleet("errors-change");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const std::string bundle = prepare_bundles(fleet);
  std::string out;
  CHECK(fleet.kiln("ci", {"smoke", "--bundle", bundle, "--change", "c99", "--wait", "--run-id", "smoke-c99"}, &out,
                   60s) == 2);
  CHECK(contains(out, "change c99 is not recorded, so there is nothing to smoke"));
  CHECK(fleet.kiln("ci", {"run", "smoke-c99"}, &out) == 5);

  request_past_the_client(fleet, "smoke-c99-2", bundle, "c99");
  const int waited = fleet.kiln("ci", {"run", "smoke-c99-2", "--wait"}, &out, 120s);
  INFO(out);
  CHECK(waited == 2);
  CHECK(contains(out, "cannot run: change c99 is not recorded"));
  CHECK(listed_verdict(fleet, "smoke-c99-2") == "error");
  REQUIRE(fleet.kiln("ci", {"jobs", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).empty());
}

TEST_CASE("a smoke whose stack file is missing ends with exit 2 naming the file, and no job runs") {
  Fleet fleet("errors-stack");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const std::string bundle = prepare_bundles(fleet);
  std::filesystem::remove(fleet.dir() / "bundles" / (bundle + ".stack.toml"));

  std::string out;
  const int smoke = fleet.kiln("ci", {"smoke", "--bundle", bundle, "--wait", "--run-id", "smoke-stack",
                                      "--junit", (fleet.dir() / "smoke.xml").string()},
                               &out, 120s);
  INFO(out);
  CHECK(smoke == 2);
  CHECK(contains(out, "the stack file of bundle " + bundle.substr(0, 12) + " is missing: " +
                          (fleet.dir() / "bundles" / (bundle + ".stack.toml")).string()));
  CHECK(contains(out, "kiln bundle build --bundle-dir " + bundle_dir(fleet)));
  CHECK_FALSE(contains(read(fleet.dir() / "smoke.xml"), "<failure"));
  CHECK(listed_verdict(fleet, "smoke-stack") == "error");
  REQUIRE(fleet.kiln("ci", {"jobs", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out).empty());
}

TEST_CASE("kiln run cancel stops a run: its jobs are cancelled and the waiting client ends with exit 2") {
  Fleet fleet("errors-cancel");
  start_two_nodes(fleet);
  fleet.start_qualifier("qualifier");
  const std::string candidate = prepare_bundles(fleet);
  auto client = fleet.start_kiln("ci", {"nightly", "--bundle", candidate, "--wait", "--run-id", "nightly-c"},
                                 fleet.dir() / "client.log");
  std::string out;
  // Cancelled once the run has jobs in flight.
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("ci", {"run", "nightly-c"}, &out) == 0 &&
                                         contains(out, " for measure mlp-"); },
                            120s));
  REQUIRE(fleet.kiln("ci", {"run", "cancel", "nightly-c"}, &out) == 0);
  CHECK(contains(out, "run nightly-c: cancel recorded"));

  const int status = client->wait(120s);
  const std::string waited = read(fleet.dir() / "client.log");
  INFO(waited);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(contains(waited, "kiln nightly nightly-c: ERROR"));
  CHECK(contains(waited, "which says nothing of the bundle: cancelled by ci"));
  CHECK(listed_verdict(fleet, "nightly-c") == "error");
  std::string err;
  REQUIRE(fleet.kiln_split("ci", {"run", "nightly-c", "--json"}, &out, &err) == 2);
  CHECK(contains(err, "cancelled by ci"));
  const auto report = nlohmann::json::parse(out);
  CHECK(report.at("cancelled_by") == "ci");
  for (const auto& model : report.at("models")) CHECK(model.at("verdict") != "pending");
  // Every job of the run has ended at the coordinator, and some were cancelled there.
  REQUIRE(Fleet::eventually([&] { return fleet.kiln_split("ci", {"jobs", "--active", "--json"}, &out, &err) == 0 &&
                                         nlohmann::json::parse(out).empty(); },
                            30s));
  REQUIRE(fleet.kiln("ci", {"jobs", "--json"}, &out) == 0);
  std::size_t cancelled = 0;
  for (const auto& job : nlohmann::json::parse(out)) cancelled += job.at("state") == "cancelled" ? 1 : 0;
  CHECK(cancelled > 0);
  CHECK(contains(fleet.log_of("qualifier"), "cancelled by ci: "));

  // A finished run is not cancelled again; a run never asked for is not found.
  CHECK(fleet.kiln("ci", {"run", "cancel", "nightly-c"}, &out) == 1);
  CHECK(contains(out, "run nightly-c has already finished (error); there is nothing to cancel"));
  CHECK(fleet.kiln("ci", {"run", "cancel", "nightly-none"}, &out) == 5);
  CHECK(contains(out, "no run nightly-none was requested"));
}
