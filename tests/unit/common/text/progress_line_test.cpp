// A wait's status: in a log each change once (and once a minute while nothing changes), on a
// terminal one line rewritten in place.
#include <doctest/doctest.h>

#include <sstream>

#include "common/text/progress_line.h"

using kiln::ProgressLine;

TEST_CASE("in a log a status is printed when it changes and once a minute while it does not") {
  std::ostringstream out;
  ProgressLine progress(out, false);
  progress.show("job 14 queued: busy", 2'000, 10'000);
  progress.show("job 14 queued: busy", 4'000, 12'000);
  CHECK(out.str() == "job 14 queued: busy (2.0s so far)\n");
  progress.show("job 14 queued: busy", 62'000, 70'000);
  progress.show("job 14 running on n01 (chips 0)", 64'000, 72'000);
  CHECK(out.str() ==
        "job 14 queued: busy (2.0s so far)\njob 14 queued: busy (1m02s so far)\njob 14 running on n01 (chips 0) "
        "(1m04s so far)\n");
}

TEST_CASE("on a terminal a status is one line rewritten in place, cut to the width, cleared when done") {
  std::ostringstream out;
  {
    ProgressLine progress(out, true, 40);
    progress.show("job 14 queued: a reason long enough to be cut", 2'000, 10'000);
    progress.show("job 14 queued: again", 4'000, 12'000);
  }
  const std::string text = out.str();
  CHECK(text.find("\r\033[Kjob 14 queued: a reason long enough to~\r") == 0);
  CHECK(text.find("\r\033[Kjob 14 queued: again (4.0s so far)") != std::string::npos);
  CHECK(text.substr(text.size() - 4) == "\r\033[K");
  CHECK(text.find('\n') == std::string::npos);
}
