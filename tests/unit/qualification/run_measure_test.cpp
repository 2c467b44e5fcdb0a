// The qualifier reads a job's correctness from kiln's own verdict on the outputs when the agent
// made one (docs/workloads.md, "Outputs kiln judges"), before the workload's `passed`.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qualification/run_measure.h"

namespace q = kiln::qualification;
using nlohmann::json;

namespace {

json document(bool workload_passed, const json& kiln_verdict) {
  json doc = {{"schema", "kiln.workload-result/1"}, {"model", "tiny"},     {"dtype", "fp32"},
              {"status", "completed"},              {"passed", workload_passed}};
  if (!kiln_verdict.is_null()) doc["kiln_verdict"] = kiln_verdict;
  return doc;
}

}  // namespace

TEST_CASE("read_workload_result: kiln's verdict on the outputs overrules the workload's passed, and says why") {
  q::QualificationModel model;
  model.name = "tiny";
  const std::string why = "the workload says passed but kiln's comparison fails; the two disagree, so the job fails: "
                          "output 'logits': FAIL: 1 of 4 elements";
  auto disagreeing = q::read_workload_result(document(true, {{"passed", false}, {"detail", why}}).dump(), model);
  REQUIRE(disagreeing);
  CHECK_FALSE(disagreeing->correct);
  CHECK(disagreeing->correctness_detail == why);

  auto agreeing = q::read_workload_result(document(true, {{"passed", true}, {"detail", ""}}).dump(), model);
  REQUIRE(agreeing);
  CHECK(agreeing->correct);

  auto own = q::read_workload_result(document(true, nullptr).dump(), model);
  REQUIRE(own);
  CHECK(own->correct);
}
