// A gang's ranks as one result: a gang whose ranks ran is judged from their documents, and only a
// gang with a rank that did not run counts as not run (and is retried).
#include <doctest/doctest.h>

#include "qualification/shell/gang.h"

namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

namespace {

q::JobResult rank_on(const std::string& node, bool correct, std::size_t samples) {
  q::JobResult r;
  r.node_id = node;
  r.correct = correct;
  if (!correct) r.correctness_detail = "output 0 off by 3%";
  r.candidate_samples.assign(samples, 100.0);
  r.baseline_samples.assign(samples, 100.0);
  return r;
}

}  // namespace

TEST_CASE("a gang whose ranks ran with wrong outputs is judged incorrect, whatever samples each kept") {
  const auto combined = qs::combine_ranks(7, {rank_on("n01", false, 10), rank_on("n02", false, 9)});
  CHECK(combined.ran);
  CHECK_FALSE(combined.correct);
  CHECK(combined.tag == 7);
  CHECK(combined.node_id == "n01+n02");
  CHECK(combined.correctness_detail == "n01: output 0 off by 3%; n02: output 0 off by 3%");

  // One rank with wrong outputs is enough; its correct peers ran too.
  const auto one = qs::combine_ranks(8, {rank_on("n01", true, 10), rank_on("n02", false, 10)});
  CHECK(one.ran);
  CHECK_FALSE(one.correct);
  CHECK(one.candidate_samples == std::vector<double>(10, 200.0));
}

TEST_CASE("a gang with a rank that did not run did not run; a correct gang needs matching samples") {
  q::JobResult crashed;
  crashed.ran = false;
  crashed.node_id = "n02";
  crashed.detail = "job 12 failed: exited with code 139";
  const auto partial = qs::combine_ranks(9, {rank_on("n01", false, 10), crashed});
  CHECK_FALSE(partial.ran);
  CHECK(partial.detail.find("n02: job 12 failed") != std::string::npos);

  const auto uneven = qs::combine_ranks(10, {rank_on("n01", true, 10), rank_on("n02", true, 9)});
  CHECK_FALSE(uneven.ran);
  CHECK(uneven.detail.find("different numbers of samples") != std::string::npos);
}
