// The in-memory entry points of the loaders that read a file (the fuzz targets use them) say
// exactly what the path-based ones say about the same text, file and line included.
#include <doctest/doctest.h>

#include "agent/host/agent_config.h"
#include "client/client.h"
#include "qualification/webhook_sink.h"
#include "qualifier/qualifier_config.h"
#include "qualifier/ticket_sinks.h"
#include "coordinator/server/coordinator_config.h"
#include "sim/chip/sim_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

namespace {

template <class FromFile, class FromText>
void check_same_error(const kiln::Result<FromFile>& from_file, const kiln::Result<FromText>& from_text,
                      const std::string& where) {
  REQUIRE_FALSE(from_file);
  REQUIRE_FALSE(from_text);
  CHECK(from_text.error().code == from_file.error().code);
  CHECK(from_text.error().message == from_file.error().message);
  CHECK(from_text.error().message.find(where) != std::string::npos);
}

}  // namespace

TEST_CASE("coordinator, client and agent configs from text report what the file loaders report") {
  kiln::testing::TempDir dir("kiln-from-text");
  const std::string bad = "# config\n\n[coordinator]\nlog_levl = \"info\"\n";
  const std::string coordinator = dir.write("coordinator.toml", bad);
  check_same_error(kiln::coordinator::load_coordinator_config(coordinator),
                   kiln::coordinator::coordinator_config_from_text(bad, coordinator), coordinator + ":4");

  const std::string client_text = "coordinator = \"tcp://127.0.0.1:7602\"\ntimeout_ms = 5\n";
  const std::string client = dir.write("client.toml", client_text);
  check_same_error(kiln::cli::load_client_config(client), kiln::cli::client_config_from_text(client_text, client),
                   client + ":2");

  const std::string agent_text = "[agent]\nnode_id = \"n01\"\n\n[knobs]\nno_such_knob = 1\n";
  const std::string agent = dir.write("agent.toml", agent_text);
  check_same_error(kiln::agent::load_agent_config(agent), kiln::agent::agent_config_from_text(agent_text, agent),
                   agent + ":5");
}

TEST_CASE("client config from text resolves relative key files against the named file's folder") {
  kiln::testing::TempDir dir("kiln-from-text");
  const std::string text =
      "coordinator = \"tcp://127.0.0.1:7602\"\ncoordinator_public_key_file = \"keys/coordinator.pub\"\n"
      "secret_key_file = \"keys/me.secret\"\n";
  const std::string path = dir.write("etc/client.toml", text);
  auto from_file = kiln::cli::load_client_config(path);
  auto from_text = kiln::cli::client_config_from_text(text, path);
  REQUIRE(from_file);
  REQUIRE(from_text);
  CHECK(from_text->secret_key_file == (dir.path() / "etc/keys/me.secret").string());
  CHECK(from_text->coordinator_public_key_file == from_file->coordinator_public_key_file);
  CHECK(from_text->secret_key_file_origin == from_file->secret_key_file_origin);
}

TEST_CASE("sim node options, fault file and node state from text report what the file readers report") {
  kiln::testing::TempDir dir("kiln-from-text");
  const std::string options_text = "state_dir = \"state\"\nfirmware_version = 7\nno_such_option = 1\n";
  const std::string options = dir.write("node.toml", options_text);
  check_same_error(kiln::sim::parse_sim_options(options), kiln::sim::parse_sim_options_toml(options_text, options),
                   options + ":3");
  const std::string good_options = "state_dir = \"state\"\n";
  auto resolved = kiln::sim::parse_sim_options_toml(good_options, dir.write("good.toml", good_options));
  REQUIRE(resolved);
  CHECK(resolved->state_dir == dir.path() / "state");

  const std::string faults_text = "[[fault]]\nchip = 0\nkind = \"thermal\"\ncolour = 1\n";
  const std::string faults = dir.write("faults.toml", faults_text);
  check_same_error(kiln::sim::read_fault_file(faults, 1000), kiln::sim::parse_fault_file(faults_text, faults, 1000),
                   faults + ":4");

  const std::string state_text = "format = 1\nnode_id = [\n";
  const std::string state = dir.write("state/state.toml", state_text);
  check_same_error(kiln::sim::read_node_state(dir.path() / "state"), kiln::sim::parse_node_state(state_text, state),
                   state + ":2");
}

TEST_CASE("qualifier and ticket webhook configs from text report what the file loaders report") {
  kiln::testing::TempDir dir("kiln-from-text");
  const std::string qualifier_text = "[qualifier]\nmodel_sets = \"models.toml\"\n\n[tickets]\ndir = \"tickets\"\n";
  const std::string qualifier = dir.write("qualifier.toml", qualifier_text);
  check_same_error(kiln::qualifier::load_qualifier_config(qualifier),
                   kiln::qualifier::qualifier_config_from_text(qualifier_text, qualifier), qualifier + ":2");

  // The webhook file is read when the sink opens: a bad one fails the same way from either entry.
  const std::string webhook_text = "url = \"http://127.0.0.1:9/hook\"\ntimeout_ms = \"soon\"\n";
  const std::string webhook = dir.write("webhook.toml", webhook_text);
  auto from_file = kiln::qualifier::open_ticket_sink((dir.path() / "tickets").string(), webhook);
  check_same_error(from_file, kiln::qualifier::webhook_config_from_text(webhook_text, webhook), webhook + ":2");

  const std::string full =
      "url = \"http://[::1]:8080/hooks/kiln?project=k\"\nbearer_token_file = \"webhook.token\"\ntimeout_ms = 5000\n"
      "max_attempts = 3\nretry_backoff_ms = 1000\n\n[headers]\nX-Tracker-Project = \"KILN\"\n";
  auto parsed = kiln::qualifier::webhook_config_from_text(full, webhook);
  REQUIRE(parsed);
  CHECK(parsed->headers.at("X-Tracker-Project") == "KILN");
  auto endpoint = kiln::qualification::webhook_endpoint(*parsed);
  REQUIRE(endpoint);
  CHECK(endpoint->host == "::1");
  CHECK(endpoint->port == "8080");
  CHECK(endpoint->host_header == "[::1]:8080");
  CHECK(endpoint->path == "/hooks/kiln?project=k");
}

TEST_CASE("a qualifier's [schedule] names the nightly's window, revisions and how many models it runs") {
  const std::string base =
      "[qualifier]\ncoordinator = \"tcp://127.0.0.1:7000\"\ncoordinator_public_key_file = \"coordinator.pub\"\n"
      "secret_key_file = \"qualifier.key\"\nmodel_set = \"models.toml\"\nbundle_dir = \"bundles\"\n"
      "golden_dir = \"golden\"\n\n[tickets]\ndir = \"tickets\"\n\n[schedule]\n";
  auto config = kiln::qualifier::qualifier_config_from_text(
      base + "nightly_start = \"23:30\"\nrevisions = [\"b\"]\nmax_models = 10\n", "/etc/kiln/qualifier.toml");
  REQUIRE_MESSAGE(config, (config ? "" : config.error().message));
  CHECK(config->schedule.enabled);
  CHECK(config->schedule.start_minute == 23 * 60 + 30);
  CHECK(config->schedule_revisions == std::vector<std::string>{"b"});
  CHECK(config->schedule_max_models == 10);

  auto every_model = kiln::qualifier::qualifier_config_from_text(base, "/etc/kiln/qualifier.toml");
  REQUIRE(every_model);
  CHECK(every_model->schedule_max_models == 0);

  auto negative = kiln::qualifier::qualifier_config_from_text(base + "max_models = -1\n", "/etc/kiln/qualifier.toml");
  REQUIRE_FALSE(negative);
  CHECK(kiln::testing::contains(negative.error().message, "max_models"));
}

TEST_CASE("a qualifier's [fleet_check] sets the slow-node thresholds; a comparison of two nodes is refused") {
  const std::string base =
      "[qualifier]\ncoordinator = \"tcp://127.0.0.1:7000\"\ncoordinator_public_key_file = \"coordinator.pub\"\n"
      "secret_key_file = \"qualifier.key\"\nmodel_set = \"models.toml\"\nbundle_dir = \"bundles\"\n"
      "golden_dir = \"golden\"\n\n[tickets]\ndir = \"tickets\"\n";
  auto defaults = kiln::qualifier::qualifier_config_from_text(base, "/etc/kiln/qualifier.toml");
  REQUIRE(defaults);
  CHECK(defaults->fleet_check_models == 2);
  CHECK(defaults->fleet_outliers.min_nodes == 4);
  CHECK(defaults->fleet_outliers.min_slowdown_percent == 10);
  auto config = kiln::qualifier::qualifier_config_from_text(
      base + "\n[fleet_check]\nmodels = 3\nmin_nodes = 6\nmin_samples_per_node = 8\nmin_slowdown_percent = 15\n"
             "outlier_mads = 4\nmin_slow_models = 3\nwait_ms = 60000\n",
      "/etc/kiln/qualifier.toml");
  REQUIRE_MESSAGE(config, (config ? "" : config.error().message));
  CHECK(config->fleet_check_models == 3);
  CHECK(config->fleet_outliers.min_nodes == 6);
  CHECK(config->fleet_outliers.min_samples_per_node == 8);
  CHECK(config->fleet_outliers.min_slowdown_percent == 15);
  CHECK(config->fleet_outliers.outlier_mads == 4);
  CHECK(config->fleet_outliers.min_slow_models == 3);
  CHECK(config->fleet_check_wait_ms == 60000);
  auto two = kiln::qualifier::qualifier_config_from_text(base + "\n[fleet_check]\nmin_nodes = 2\nspeed = 1\n",
                                                         "/etc/kiln/qualifier.toml");
  REQUIRE_FALSE(two);
  CHECK(kiln::testing::contains(two.error().message, "min_nodes must be an integer from 3"));
  CHECK(kiln::testing::contains(two.error().message, "speed"));
}

TEST_CASE("[http] listen in coordinator.toml, agent.toml and qualifier.toml: optional, HOST:PORT, problems at its line") {
  const std::string coordinator = "[coordinator]\nsecret_key_file = \"coordinator.key\"\n\n";
  const std::string agent =
      "node_id = \"n01\"\nwork_dir = \"work\"\nsecret_key_file = \"n01.key\"\n\n[coordinator]\n"
      "endpoint = \"tcp://127.0.0.1:7601\"\npublic_key_file = \"coordinator.pub\"\n\n[driver]\nlibrary = \"sim.so\"\n\n";
  const std::string qualifier =
      "[qualifier]\ncoordinator = \"tcp://127.0.0.1:7602\"\ncoordinator_public_key_file = \"coordinator.pub\"\n"
      "secret_key_file = \"qualifier.key\"\nmodel_set = \"models.toml\"\nbundle_dir = \"bundles\"\n"
      "golden_dir = \"golden\"\n\n[tickets]\ndir = \"tickets\"\n\n";
  const auto listen_of = [&](const std::string& http) {
    auto c = kiln::coordinator::coordinator_config_from_text(coordinator + http, "/etc/kiln/coordinator.toml");
    auto a = kiln::agent::agent_config_from_text(agent + http, "/etc/kiln/agent.toml");
    auto q = kiln::qualifier::qualifier_config_from_text(qualifier + http, "/etc/kiln/qualifier.toml");
    REQUIRE_MESSAGE(c, (c ? "" : c.error().message));
    REQUIRE_MESSAGE(a, (a ? "" : a.error().message));
    REQUIRE_MESSAGE(q, (q ? "" : q.error().message));
    CHECK(c->http_listen == a->http_listen);
    CHECK(q->http_listen == a->http_listen);
    return c->http_listen;
  };
  CHECK(listen_of("") == "");  // no table: nothing listens
  CHECK(listen_of("[http]\nlisten = \"127.0.0.1:9470\"\n") == "127.0.0.1:9470");
  CHECK(listen_of("[http]\nlisten = \"[::1]:9470\"\n") == "[::1]:9470");

  for (const auto& [http, problem] : std::vector<std::pair<std::string, std::string>>{
           {"[http]\nlisten = \"127.0.0.1\"\n", "has no port"},
           {"[http]\nlisten = \"127.0.0.1:70000\"\n", "port from 1 to 65535"},
           {"[http]\nlisten = \"0.0.0.0:9470\"\nport = 9470\n", "port"},
           {"[http]\n", "listen"}}) {
    CAPTURE(http);
    auto c = kiln::coordinator::coordinator_config_from_text(coordinator + http, "/etc/kiln/coordinator.toml");
    auto a = kiln::agent::agent_config_from_text(agent + http, "/etc/kiln/agent.toml");
    auto q = kiln::qualifier::qualifier_config_from_text(qualifier + http, "/etc/kiln/qualifier.toml");
    REQUIRE_FALSE(c);
    REQUIRE_FALSE(a);
    REQUIRE_FALSE(q);
    CHECK(kiln::testing::contains(c.error().message, problem));
    CHECK(kiln::testing::contains(a.error().message, problem));
    CHECK(kiln::testing::contains(q.error().message, problem));
  }
  // Each problem names the line of its key.
  const std::string no_port = "[http]\nlisten = \"9470\"\n";
  CHECK(kiln::testing::contains(
      kiln::coordinator::coordinator_config_from_text(coordinator + no_port, "/etc/kiln/coordinator.toml").error().message,
      "/etc/kiln/coordinator.toml:5:"));
  CHECK(kiln::testing::contains(kiln::agent::agent_config_from_text(agent + no_port, "/etc/kiln/agent.toml").error().message,
                                "/etc/kiln/agent.toml:13:"));
  CHECK(kiln::testing::contains(
      kiln::qualifier::qualifier_config_from_text(qualifier + no_port, "/etc/kiln/qualifier.toml").error().message,
      "/etc/kiln/qualifier.toml:13:"));
}

TEST_CASE("client and agent configs list an active coordinator and its standbys, in order") {
  kiln::testing::TempDir dir("kiln-from-text");
  const std::string keys = "coordinator_public_key_file = \"c.pub\"\nsecret_key_file = \"me.key\"\n";
  auto client = kiln::cli::client_config_from_text(
      "coordinator = [\"tcp://a.example:7602\", \"tcp://b.example:7602\"]\n" + keys, dir.file("client.toml"));
  REQUIRE(client);
  CHECK(kiln::cli::coordinator_endpoints(*client) ==
        std::vector<std::string>{"tcp://a.example:7602", "tcp://b.example:7602"});

  const auto problem = [&](const std::string& value) {
    auto loaded = kiln::cli::client_config_from_text("coordinator = " + value + "\n" + keys, dir.file("client.toml"));
    REQUIRE_FALSE(loaded);
    return loaded.error().message;
  };
  CHECK(kiln::testing::contains(problem("[]"), "client.toml:1:1: coordinator is an empty list"));
  CHECK(kiln::testing::contains(problem("[\"tcp://a:1\", \"tcp://a:1\"]"), "lists \"tcp://a:1\" twice"));
  CHECK(kiln::testing::contains(problem("[\"tcp://a:1\", 7]"), "must hold strings only"));
  CHECK(kiln::testing::contains(problem("[\"tcp://a:1\", \"udp://b:1\"]"), "coordinator \"udp://b:1\""));

  const auto reading = kiln::agent::read_agent_config_text(
      "[coordinator]\nendpoint = [\"tcp://a.example:7601\", \"tcp://b.example:7601\"]\n", dir.file("agent.toml"));
  CHECK(reading.config.coordinator_endpoint == "tcp://a.example:7601");
  CHECK(reading.config.standby_endpoints == std::vector<std::string>{"tcp://b.example:7601"});
}
