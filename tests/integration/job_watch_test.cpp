// `kiln submit --wait` against the real coordinator and a simulated agent follows its job with
// watch_jobs: the requests the coordinator takes from it stay the same whether the job runs 1 s
// or 5 s, where a client following by polling (client.toml watch_jobs = false, as with a
// coordinator older than watch_jobs) sends more the longer it runs.
#include <fstream>
#include <regex>
#include <string>

#include <doctest/doctest.h>

#include "tests/integration/fleet_fixture.h"
#include "tests/integration/metrics_page.h"
#include "tests/integration/run_command.h"

using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

// Every client request the coordinator answered so far, of any type.
double client_requests(const std::string& coordinator_http) {
  const std::string page = scrape(coordinator_http);
  static const std::regex count(R"(\nkiln_client_request_seconds_count\{type="[a-z_]+"\} ([0-9.e+]+))");
  double total = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), count); it != std::sregex_iterator(); ++it) {
    total += std::stod((*it)[1].str());
  }
  return total;
}

}  // namespace

TEST_CASE("kiln submit --wait sends as many requests for a job of 5 s as for a job of 1 s") {
  Fleet fleet("job-watch");
  const std::string coordinator_http = Fleet::free_loopback_address();
  fleet.add_coordinator_tables(http_table(coordinator_http));
  fleet.add_key("dev", "developer");
  fleet.add_agent({"n01", "a"});
  fleet.start_coordinator();
  fleet.start_agent("n01");
  std::string out;
  REQUIRE(Fleet::eventually([&] { return fleet.kiln("dev", {"nodes"}, &out) == 0 && out.find("up") != std::string::npos; },
                            30s));

  // Requests of one `kiln submit --wait` of a job sleeping `seconds`, as the coordinator counted them.
  const auto requests_of_wait = [&](const std::string& seconds) {
    const double before = client_requests(coordinator_http);
    REQUIRE(fleet.kiln("dev", {"submit", "--workload", "sleep", "--wait", "--", seconds}, &out, 120s) == 0);
    CHECK(out.find("succeeded") != std::string::npos);
    return client_requests(coordinator_http) - before;
  };
  const double short_job = requests_of_wait("1");
  const double long_job = requests_of_wait("5");
  MESSAGE("requests for a job of 1 s: " << short_job << ", of 5 s: " << long_job);
  // submit_job, a watch_jobs per state it passes through (assigned, running, succeeded: one may
  // be passed before a watch asks), and get_job for its result.
  CHECK(long_job <= 5);
  CHECK(short_job <= 5);
  CHECK(long_job <= short_job + 1);

  // Following by polling, the same job of 5 s costs a get_job every 250 ms.
  const std::filesystem::path polling = fleet.dir() / "client-dev-polling.toml";
  {
    std::ifstream in(fleet.dir() / "client-dev.toml");
    std::ofstream(polling) << in.rdbuf() << "watch_jobs = false\n";
  }
  const double before = client_requests(coordinator_http);
  const Ran ran = run(std::string(KILN_BIN_DIR) + "/kiln --config " + polling.string() +
                      " submit --workload sleep --wait -- 5", 120s);
  INFO(ran.output);
  CHECK(ran.status == 0);
  const double polled = client_requests(coordinator_http) - before;
  MESSAGE("requests when polling for a job of 5 s: " << polled);
  CHECK(polled > long_job);
}
