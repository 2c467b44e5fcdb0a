// Prometheus's text format as kiln writes it: HELP and TYPE, escaping, histograms.
#include <cmath>
#include <limits>

#include <doctest/doctest.h>

#include "common/metrics/exposition.h"

using namespace kiln::metrics;

TEST_CASE("families are written with HELP and TYPE, then their samples") {
  Exposition out;
  out.gauge("kiln_agents_connected", "Agents with a live session.");
  out.sample({}, 3);
  out.counter("kiln_jobs_finished_total", "Jobs that ended, by class and outcome.");
  out.sample({{"class", "presubmit"}, {"outcome", "succeeded"}}, 12);
  out.sample({{"class", "nightly"}, {"outcome", "timed_out"}}, 0);
  out.gauge("kiln_nodes", "Nodes by state.");  // a family may have no samples
  CHECK(out.text() ==
        "# HELP kiln_agents_connected Agents with a live session.\n"
        "# TYPE kiln_agents_connected gauge\n"
        "kiln_agents_connected 3\n"
        "# HELP kiln_jobs_finished_total Jobs that ended, by class and outcome.\n"
        "# TYPE kiln_jobs_finished_total counter\n"
        "kiln_jobs_finished_total{class=\"presubmit\",outcome=\"succeeded\"} 12\n"
        "kiln_jobs_finished_total{class=\"nightly\",outcome=\"timed_out\"} 0\n"
        "# HELP kiln_nodes Nodes by state.\n"
        "# TYPE kiln_nodes gauge\n");
}

TEST_CASE("label values escape backslash, quote and newline; help escapes backslash and newline") {
  Exposition out;
  out.gauge("kiln_node_quarantined_since_timestamp_seconds", "When a node was quarantined \\ \"why\"\nsecond line.");
  out.sample({{"node", "n03"}, {"reason", "probe \"memory\" failed\non C:\\chip3"}}, 1.7e9);
  CHECK(out.text() ==
        "# HELP kiln_node_quarantined_since_timestamp_seconds When a node was quarantined \\\\ \"why\"\\nsecond "
        "line.\n"
        "# TYPE kiln_node_quarantined_since_timestamp_seconds gauge\n"
        "kiln_node_quarantined_since_timestamp_seconds{node=\"n03\",reason=\"probe \\\"memory\\\" failed\\non "
        "C:\\\\chip3\"} 1700000000\n");
  CHECK(escape_label_value("plain") == "plain");
}

TEST_CASE("values are the shortest decimal that reads back, or NaN and the infinities") {
  CHECK(format_value(0) == "0");
  CHECK(format_value(0.1) == "0.1");
  CHECK(format_value(-2.5) == "-2.5");
  CHECK(format_value(1733184000.123) == "1733184000.123");
  CHECK(format_value(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(std::stod(format_value(1.0 / 3.0)) == 1.0 / 3.0);
}

TEST_CASE("a histogram's buckets are cumulative, end with +Inf, and carry _sum and _count") {
  Histogram waits({1, 60, 2700});
  for (double v : {0.5, 1.0, 30.0, 2700.0, 5000.0}) waits.observe(v);
  CHECK(waits.count() == 5);
  CHECK(waits.sum() == doctest::Approx(7731.5));
  CHECK(waits.bucket_counts() == std::vector<std::uint64_t>{2, 1, 1, 1});
  Exposition out;
  out.histogram("kiln_queue_wait_seconds", "Queue wait.");
  out.sample({{"class", "presubmit"}}, waits);
  out.sample({{"class", "release"}}, Histogram({1, 60, 2700}));
  CHECK(out.text() ==
        "# HELP kiln_queue_wait_seconds Queue wait.\n"
        "# TYPE kiln_queue_wait_seconds histogram\n"
        "kiln_queue_wait_seconds_bucket{class=\"presubmit\",le=\"1\"} 2\n"
        "kiln_queue_wait_seconds_bucket{class=\"presubmit\",le=\"60\"} 3\n"
        "kiln_queue_wait_seconds_bucket{class=\"presubmit\",le=\"2700\"} 4\n"
        "kiln_queue_wait_seconds_bucket{class=\"presubmit\",le=\"+Inf\"} 5\n"
        "kiln_queue_wait_seconds_sum{class=\"presubmit\"} 7731.5\n"
        "kiln_queue_wait_seconds_count{class=\"presubmit\"} 5\n"
        "kiln_queue_wait_seconds_bucket{class=\"release\",le=\"1\"} 0\n"
        "kiln_queue_wait_seconds_bucket{class=\"release\",le=\"60\"} 0\n"
        "kiln_queue_wait_seconds_bucket{class=\"release\",le=\"2700\"} 0\n"
        "kiln_queue_wait_seconds_bucket{class=\"release\",le=\"+Inf\"} 0\n"
        "kiln_queue_wait_seconds_sum{class=\"release\"} 0\n"
        "kiln_queue_wait_seconds_count{class=\"release\"} 0\n");
}
