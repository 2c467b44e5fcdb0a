// The registry's models, really computed on the CPU: on the emulated chip (bf16/fp8 storage,
// fp32 accumulation) or as the fp32 golden reference. Pure: weights and inputs come from the
// data seed, faults from the options.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/numerics/compare.h"
#include "common/numerics/tensor_io.h"
#include "sim/workloads/registry.h"

namespace kiln::sim::workloads {

struct ModelRunOptions {
  bool reference = false;                // the fp32 golden
  std::uint64_t data_seed = 1;           // the checkpoint's weights and the inputs
  std::set<std::string> faulty_kernels;  // from the stack-effects file
  double sdc_rate = 0.0;                 // > 0: the chip corrupts outputs (sdc fault)
  std::uint64_t sdc_seed = 0;
};

struct LossPoint {
  int step = 0;
  double loss = 0.0;
};

// Every 5 steps, as Megatron-LM's golden loss curves.
inline constexpr int kLossCurveEverySteps = 5;

struct ModelRun {
  std::vector<numerics::NamedTensor> outputs;  // fp32 values; inference models
  std::vector<LossPoint> loss_curve;           // training
  std::optional<double> eval_score;            // training: held-out accuracy in [0, 1]
};

Result<ModelRun> run_model(const ModelSpec& spec, const ModelRunOptions& options);

// train-tiny one SGD step at a time: its golden run is the first 100 steps, a stability run
// trains for as long as it lasts. The same data seed gives the same steps.
class TinyTrainer {
 public:
  TinyTrainer(const ModelSpec& spec, const ModelRunOptions& options);
  ~TinyTrainer();
  TinyTrainer(const TinyTrainer&) = delete;
  TinyTrainer& operator=(const TinyTrainer&) = delete;
  double step();  // the step's mean loss over its batch
  double eval();  // held-out accuracy in [0, 1]

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// How one output is compared with its golden.
struct OutputCheck {
  std::string name;
  numerics::CompareOptions options;   // dtype and tolerance filled in by tolerance_for
  double atol_rms_fraction = 0.0;     // atol = this times the golden's RMS
  std::optional<double> min_topk_agreement;  // logits: gate on top-k agreement too
};

// The checks of a model's outputs (empty for training models).
std::vector<OutputCheck> output_checks(const ModelSpec& spec);

// The check's options for this golden: the scale-dependent atol filled in.
numerics::CompareOptions tolerance_for(const OutputCheck& check, const numerics::Tensor& golden);

// Training gates (DESIGN.md): each loss point within a 5% relative band of the reference, at
// most 1% of points outside it (rounded down), NaN fails; eval at least 99% of the reference.
inline constexpr double kLossBandRelative = 0.05;
inline constexpr double kLossPointsAllowedOutside = 0.01;
inline constexpr double kEvalMinFractionOfReference = 0.99;

struct TrainingCheck {
  bool passed = true;
  bool loss_curve_passed = true;
  int points_compared = 0;
  int points_outside_band = 0;
  int points_allowed_outside = 0;
  double max_relative_deviation = 0.0;
  bool eval_passed = true;
  double eval_score = 0.0;
  double eval_reference = 0.0;
  std::string detail;  // readable: what failed
};

TrainingCheck check_training(const std::vector<LossPoint>& reference, double eval_reference,
                             const std::vector<LossPoint>& actual, double eval_score);

}  // namespace kiln::sim::workloads
