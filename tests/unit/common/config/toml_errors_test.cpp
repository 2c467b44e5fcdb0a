#include <string>

#include <doctest/doctest.h>

#include "common/config/endpoint.h"
#include "common/config/toml_errors.h"
#include "tests/support/temp_dir.h"
#include "tests/support/text.h"

using namespace kiln;

namespace {

using kiln::testing::contains;

}  // namespace

TEST_CASE("an unknown key is reported at its line with the nearest known key, or the keys there are") {
  auto table = config::parse_toml("[db]\npath = \"x\"\n\ntimout_ms = 5\n", "set.toml", "fix it");
  REQUIRE(table.has_value());
  const toml::table& db = *(*table)["db"].as_table();
  auto typo = config::check_known_keys("set.toml", db, "[db]", {"path", "timeout_ms"});
  REQUIRE_FALSE(typo.has_value());
  CHECK(typo.error().code == Errc::config);
  CHECK(typo.error().message == "set.toml:4:1: unknown key 'timout_ms' in [db]; did you mean 'timeout_ms'?");

  auto other = config::check_known_keys("set.toml", db, "[db]", {"path", "retries"});
  REQUIRE_FALSE(other.has_value());
  CHECK(contains(other.error().message, "unknown key 'timout_ms' in [db]; known keys: path, retries"));

  CHECK(config::check_known_keys("set.toml", db, "[db]", {"path", "timout_ms"}).has_value());
}

TEST_CASE("a near miss is a typo; a different word of similar length is not") {
  CHECK(config::nearest_name("nodeid", {"node_id", "work_dir"}) == "node_id");
  CHECK(config::nearest_name("heartbeat_interval", {"heartbeat_interval_ms"}) == "heartbeat_interval_ms");
  CHECK_FALSE(config::nearest_name("mode", {"path", "group"}).has_value());
  CHECK_FALSE(config::nearest_name("name", {"role"}).has_value());
  // Three edits apart at most, whatever the lengths: a key much longer than any known one is no typo.
  CHECK(config::nearest_name("log_lvl", {"log_level", "log"}) == "log_level");
  CHECK_FALSE(config::nearest_name(std::string(4000, 'x') + "node_id", {"node_id"}).has_value());
  CHECK_FALSE(config::nearest_name("n", {"node_id"}).has_value());
}

TEST_CASE("TOML syntax errors and unreadable files are values naming the file and position") {
  auto syntax = config::parse_toml("a = 1\nb = \n", "x.toml", "fix the file");
  REQUIRE_FALSE(syntax.has_value());
  CHECK(syntax.error().code == Errc::config);
  CHECK(contains(syntax.error().message, "x.toml:2:"));
  CHECK(contains(syntax.error().message, "not valid TOML"));
  CHECK(contains(syntax.error().message, "; fix the file"));

  auto missing = config::parse_toml_file("/nonexistent/x.toml", "the test config", "pass --config", "fix it");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == Errc::io);
  CHECK(contains(missing.error().message, "cannot read the test config /nonexistent/x.toml"));
  CHECK(contains(missing.error().message, "pass --config"));

  kiln::testing::TempDir dir("kiln-toml-errors");
  auto read = config::parse_toml_file(dir.write("ok.toml", "a = 1\n"), "the test config", "", "");
  REQUIRE(read.has_value());
  CHECK((*read)["a"].value<int>() == 1);
}

TEST_CASE("tcp endpoints need a host and a port from 1 to 65535; a bound socket may use every interface") {
  CHECK_FALSE(config::tcp_endpoint_problem("tcp://127.0.0.1:7601", false).has_value());
  CHECK_FALSE(config::tcp_endpoint_problem("tcp://[::1]:7601", false).has_value());
  CHECK_FALSE(config::tcp_endpoint_problem("tcp://*:7601", true).has_value());
  CHECK(config::tcp_endpoint_problem("tcp://*:7601", false).has_value());
  CHECK(config::tcp_endpoint_problem("tcp://127.0.0.1:70000", true) == "must use a port between 1 and 65535");
  CHECK(config::tcp_endpoint_problem("tcp://127.0.0.1:0", true) == "must use a port between 1 and 65535");
  CHECK(config::tcp_endpoint_problem("tcp://127.0.0.1", true) == "must name a port, as in tcp://host:5555");
  CHECK(config::tcp_endpoint_problem("udp://127.0.0.1:1", true) == "must start with tcp://");
}
