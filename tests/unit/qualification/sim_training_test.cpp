// The gate's defaults against the sim's real training workload: the honest bf16 run of
// train-tiny must pass against its fp32 reference, a broken kernel must fail it.
#include <doctest/doctest.h>

#include "qualification/correctness.h"
#include "sim/workloads/models.h"

namespace q = kiln::qualification;
namespace w = kiln::sim::workloads;

namespace {

q::TrainingRun to_run(const w::ModelRun& run) {
  q::TrainingRun out;
  for (const auto& point : run.loss_curve) out.loss_curve.push_back({point.step, point.loss});
  out.eval_score = run.eval_score;
  return out;
}

}  // namespace

TEST_CASE("train-tiny in bf16 follows its fp32 reference under the default gate; a broken kernel does not") {
  const w::ModelSpec* spec = w::find_model("train-tiny");
  REQUIRE(spec != nullptr);
  for (std::uint64_t data_seed : {1u, 2u, 3u}) {
    w::ModelRunOptions options;
    options.data_seed = data_seed;
    options.reference = true;
    auto golden = w::run_model(*spec, options);
    REQUIRE(golden.has_value());
    const q::TrainingRun reference_run = to_run(*golden);
    const q::TrainingReference reference{reference_run.loss_curve, reference_run.eval_score};

    options.reference = false;
    auto chip = w::run_model(*spec, options);
    REQUIRE(chip.has_value());
    auto verdict = q::check_training(reference, to_run(*chip));
    REQUIRE(verdict.has_value());
    INFO("data seed " << data_seed << ": " << verdict->summary);
    CHECK(verdict->passed);

    for (const char* kernel : {"gemm-bf16", "sgd"}) {
      options.faulty_kernels = {kernel};
      auto broken = w::run_model(*spec, options);
      REQUIRE(broken.has_value());
      auto failed = q::check_training(reference, to_run(*broken));
      REQUIRE(failed.has_value());
      INFO(std::string(kernel) << ": " << failed->summary);
      CHECK_FALSE(failed->passed);
    }
    options.faulty_kernels.clear();
  }
}
