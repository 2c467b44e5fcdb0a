#include <doctest/doctest.h>

#include "report/html.h"
#include "report/svg_plot.h"
#include "tests/unit/report/report_samples.h"

namespace r = kiln::report;
using kiln::testing::occurrences;

TEST_CASE("escape turns every character that could open a tag or leave an attribute into a reference") {
  CHECK(r::escape("<a href=\"x\" title='y'>&</a>") ==
        "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  CHECK(r::escape("plain text, \u00FCml\u00E4ute") == "plain text, \u00FCml\u00E4ute");
}

TEST_CASE("times, durations and numbers as the pages write them") {
  CHECK(r::utc_time(0) == "");
  CHECK(r::utc_time(1'800'000'000'000) == "2027-01-15 08:00:00 UTC");
  CHECK(r::duration_text(850) == "850 ms");
  CHECK(r::duration_text(4'200) == "4.2 s");
  CHECK(r::duration_text(192'000) == "3 min 12 s");
  CHECK(r::duration_text(7'500'000) == "2 h 5 min");
  CHECK(r::number_text(1234.5678) == "1235");
  CHECK(r::percent_text(-0.0305) == "-3.05%");
}

TEST_CASE("ticks fall on round numbers inside the range") {
  const auto ticks = r::round_ticks({963.2, 1006.9}, 5);
  REQUIRE_FALSE(ticks.empty());
  CHECK(ticks.front().value >= 963.2);
  CHECK(ticks.back().value <= 1006.9);
  CHECK(ticks.front().label == "970");
  CHECK(ticks[1].value - ticks[0].value == doctest::Approx(10));
  CHECK(r::round_ticks({1, 1}).empty());
  const r::Range single = r::padded_range({50});
  CHECK(single.low == doctest::Approx(47.5));
  CHECK(single.high == doctest::Approx(52.5));
}

TEST_CASE("a plot: one element per point with its series and a tooltip, escaped, and a title for screen readers") {
  r::Plot plot("throughput", "p-1", "Throughput of <m>", "3 points", {0, 2}, {0, 10});
  plot.point("history", r::Shape::circle, {0, 1}, "run <a>", "a.html");
  plot.point("history", r::Shape::ring, {1, 2}, "run b");
  plot.point("candidate", r::Shape::diamond, {2, 3}, "sample");
  plot.point("candidate", r::Shape::cross, {2, 4}, "sample");
  plot.point("baseline", r::Shape::square, {2, 5}, "sample");
  plot.point("probe", r::Shape::triangle, {2, 6}, "probe");
  const std::string svg = plot.svg();
  CHECK(occurrences(svg, "data-series=\"history\"") == 2);
  CHECK(occurrences(svg, "data-series=\"candidate\"") == 2);
  CHECK(occurrences(svg, "<circle ") == 2);
  CHECK(occurrences(svg, "<rect ") == 1);
  CHECK(occurrences(svg, "<path ") == 1);
  CHECK(occurrences(svg, "<polygon ") == 2);
  CHECK(svg.find("<title id=\"p-1-title\">Throughput of &lt;m&gt;</title>") != std::string::npos);
  CHECK(svg.find("<desc id=\"p-1-desc\">3 points</desc>") != std::string::npos);
  CHECK(svg.find("<a href=\"a.html\"><circle") != std::string::npos);
  CHECK(svg.find("<title>run &lt;a&gt;</title>") != std::string::npos);
}
