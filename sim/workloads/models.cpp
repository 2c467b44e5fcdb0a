#include "sim/workloads/models.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/stats/rng.h"
#include "sim/workloads/kernels.h"

namespace kiln::sim::workloads {

using numerics::DType;

namespace {

// Independent streams of the data seed, one per tensor, so adding a tensor does not move the
// others.
enum Stream : std::uint64_t {
  kInput = 1, kW1, kW2, kEmbedding, kPosition, kWq, kWk, kWv, kWo, kTokens, kTeacher, kTrainData,
  kEvalData,
};

Matrix random_matrix(int rows, int cols, double scale, std::uint64_t seed, std::uint64_t stream) {
  stats::Rng rng(stats::derive_seed(seed, stream));
  Matrix m(rows, cols);
  for (auto& x : m.data) x = static_cast<float>(rng.normal() * scale);
  return m;
}

numerics::NamedTensor to_tensor(std::string name, const Matrix& m) {
  return {std::move(name), numerics::to_tensor(m, DType::f32)};
}

KernelContext context_for(const ModelRunOptions& options) {
  return KernelContext{options.reference, options.faulty_kernels};
}

std::string gemm_kernel(const ModelSpec& spec) {
  return spec.dtype == "bf16" ? "gemm-bf16" : "gemm-fp8";
}

DType storage_dtype(const ModelSpec& spec) {
  return spec.dtype == "bf16" ? DType::bf16 : DType::f8_e4m3;
}

void maybe_corrupt(const ModelRunOptions& options, Matrix& m, std::uint64_t stream) {
  if (!options.reference && options.sdc_rate > 0) corrupt(m, options.sdc_rate, options.sdc_seed, stream);
}

ModelRun run_mlp(const ModelSpec& spec, const ModelRunOptions& options) {
  constexpr int kBatch = 32;
  constexpr int kIn = 256;
  constexpr int kHidden = 512;
  const KernelContext ctx = context_for(options);
  const DType weights_dtype = storage_dtype(spec);
  Matrix x = random_matrix(kBatch, kIn, 1.0, options.data_seed, kInput);
  x = checkpoint_weights(x, DType::bf16);  // the inputs arrive in bf16
  const Matrix w1 = checkpoint_weights(random_matrix(kIn, kHidden, 1.0 / std::sqrt(kIn), options.data_seed, kW1),
                                       weights_dtype);
  const Matrix w2 = checkpoint_weights(
      random_matrix(kHidden, kIn, 1.0 / std::sqrt(kHidden), options.data_seed, kW2), weights_dtype);
  const std::string gemm_name = gemm_kernel(spec);
  Matrix h = gemm(ctx, gemm_name, x, w1);
  gelu(ctx, h);
  Matrix y = gemm(ctx, gemm_name, h, w2);
  maybe_corrupt(options, y, 1);
  ModelRun run;
  run.outputs.push_back(to_tensor("output", y));
  return run;
}

ModelRun run_transformer(const ModelSpec& spec, const ModelRunOptions& options) {
  constexpr int kSeq = 64;
  constexpr int kModel = 64;
  constexpr int kHeads = 2;
  constexpr int kHead = kModel / kHeads;
  constexpr int kFfn = 256;
  constexpr int kVocab = 256;
  const KernelContext ctx = context_for(options);
  const DType weights_dtype = storage_dtype(spec);
  const std::uint64_t seed = options.data_seed;
  auto weights = [&](int rows, int cols, std::uint64_t stream) {
    return checkpoint_weights(random_matrix(rows, cols, 1.0 / std::sqrt(rows), seed, stream), weights_dtype);
  };
  // Embeddings and the tied logit projection stay bf16, as they usually do in fp8 recipes.
  const Matrix embedding = checkpoint_weights(random_matrix(kVocab, kModel, 1.0, seed, kEmbedding), DType::bf16);
  const Matrix position = checkpoint_weights(random_matrix(kSeq, kModel, 0.1, seed, kPosition), DType::bf16);
  const Matrix wq = weights(kModel, kModel, kWq), wk = weights(kModel, kModel, kWk);
  const Matrix wv = weights(kModel, kModel, kWv), wo = weights(kModel, kModel, kWo);
  const Matrix w1 = weights(kModel, kFfn, kW1), w2 = weights(kFfn, kModel, kW2);
  const std::string proj = gemm_kernel(spec);

  stats::Rng token_rng(stats::derive_seed(seed, kTokens));
  Matrix h(kSeq, kModel);
  for (int t = 0; t < kSeq; ++t) {
    const int token = static_cast<int>(token_rng.below(kVocab));
    for (int c = 0; c < kModel; ++c) h.at(t, c) = embedding.at(token, c) + position.at(t, c);
  }
  store_bf16(ctx, h);
  store_as(ctx, "embedding", h);

  Matrix a = h;
  layernorm(ctx, a);
  const Matrix q = gemm(ctx, proj, a, wq), k = gemm(ctx, proj, a, wk), v = gemm(ctx, proj, a, wv);
  Matrix attended(kSeq, kModel);
  for (int head = 0; head < kHeads; ++head) {
    Matrix qh(kSeq, kHead), kh(kSeq, kHead), vh(kSeq, kHead);
    for (int t = 0; t < kSeq; ++t) {
      for (int c = 0; c < kHead; ++c) {
        qh.at(t, c) = q.at(t, head * kHead + c) / std::sqrt(static_cast<float>(kHead));
        kh.at(t, c) = k.at(t, head * kHead + c);
        vh.at(t, c) = v.at(t, head * kHead + c);
      }
    }
    // Attention runs its two matrix products in bf16 whatever the projections use.
    const Matrix out = attention(ctx, qh, kh, vh);
    for (int t = 0; t < kSeq; ++t) {
      for (int c = 0; c < kHead; ++c) attended.at(t, head * kHead + c) = out.at(t, c);
    }
  }
  add_in_place(ctx, h, gemm(ctx, proj, attended, wo));
  Matrix b = h;
  layernorm(ctx, b);
  Matrix f = gemm(ctx, proj, b, w1);
  gelu(ctx, f);
  add_in_place(ctx, h, gemm(ctx, proj, f, w2));
  maybe_corrupt(options, h, 1);
  Matrix z = h;
  layernorm(ctx, z);
  Matrix logits = gemm_bt(ctx, "gemm-bf16", z, embedding);
  maybe_corrupt(options, logits, 2);
  ModelRun run;
  run.outputs.push_back(to_tensor("hidden", h));
  run.outputs.push_back(to_tensor("logits", logits));
  return run;
}

ModelRun run_training(const ModelSpec& spec, const ModelRunOptions& options) {
  constexpr int kSteps = 100;
  TinyTrainer trainer(spec, options);
  ModelRun run;
  double interval_loss = 0;
  for (int step = 1; step <= kSteps; ++step) {
    // Each point is the mean over its logging interval, as Megatron-LM logs its lm loss.
    interval_loss += trainer.step();
    if (step % kLossCurveEverySteps == 0) {
      run.loss_curve.push_back({step, interval_loss / kLossCurveEverySteps});
      interval_loss = 0;
    }
  }
  run.eval_score = trainer.eval();
  return run;
}

}  // namespace

// A 16-32-4 classifier learning a random linear teacher: bf16 forward and backward on the chip
// with fp32 master weights (mixed precision), plain fp32 for the reference.
namespace {
constexpr int kTrainIn = 16;
constexpr int kTrainHidden = 32;
constexpr int kTrainClasses = 4;
constexpr int kTrainBatch = 128;
constexpr int kTrainEval = 512;
constexpr float kLearningRate = 0.05f;
constexpr float kMomentum = 0.9f;
}  // namespace

struct TinyTrainer::State {
  struct Forward {
    Matrix pre, hidden, probs;
  };

  State(const ModelSpec& spec, const ModelRunOptions& run_options)
      : options(run_options),
        ctx(context_for(run_options)),
        gemm_name(gemm_kernel(spec)),
        teacher(random_matrix(kTrainIn, kTrainClasses, 1.0, run_options.data_seed, kTeacher)),
        w1(random_matrix(kTrainIn, kTrainHidden, 1.0 / std::sqrt(kTrainIn), run_options.data_seed, kW1)),
        w2(random_matrix(kTrainHidden, kTrainClasses, 1.0 / std::sqrt(kTrainHidden), run_options.data_seed, kW2)),
        v1(kTrainIn, kTrainHidden),
        v2(kTrainHidden, kTrainClasses) {}

  std::vector<int> labels_for(const Matrix& x) const {
    std::vector<int> labels(static_cast<std::size_t>(x.rows));
    for (int r = 0; r < x.rows; ++r) {
      float best = -1e30f;
      for (int c = 0; c < kTrainClasses; ++c) {
        float s = 0;
        for (int i = 0; i < kTrainIn; ++i) s += x.at(r, i) * teacher.at(i, c);
        if (s > best) {
          best = s;
          labels[static_cast<std::size_t>(r)] = c;
        }
      }
    }
    return labels;
  }

  Forward forward(const Matrix& x) {
    Matrix w1_chip = w1, w2_chip = w2;
    store_bf16(ctx, w1_chip);
    store_bf16(ctx, w2_chip);
    Forward out;
    out.pre = gemm(ctx, gemm_name, x, w1_chip);
    out.hidden = out.pre;
    gelu(ctx, out.hidden);
    maybe_corrupt(options, out.hidden, ++sdc_stream);
    out.probs = gemm(ctx, gemm_name, out.hidden, w2_chip);
    softmax_rows(ctx, out.probs, false);
    return out;
  }

  double step() {
    ++steps_done;
    Matrix x = random_matrix(kTrainBatch, kTrainIn, 1.0, stats::derive_seed(options.data_seed, kTrainData),
                             steps_done);
    store_bf16(ctx, x);
    const std::vector<int> labels = labels_for(x);
    Forward fw = forward(x);
    double loss = 0;
    Matrix dlogits = fw.probs;
    for (int r = 0; r < kTrainBatch; ++r) {
      const int y = labels[static_cast<std::size_t>(r)];
      loss -= std::log(std::max(static_cast<double>(fw.probs.at(r, y)), 1e-30));
      dlogits.at(r, y) -= 1.0f;
      for (int c = 0; c < kTrainClasses; ++c) dlogits.at(r, c) /= static_cast<float>(kTrainBatch);
    }
    loss /= kTrainBatch;
    store_as(ctx, "cross-entropy", dlogits);

    // Backward: the gradient products are gemms on the chip too.
    Matrix hidden_t(kTrainHidden, kTrainBatch), x_t(kTrainIn, kTrainBatch), w2_t(kTrainClasses, kTrainHidden);
    for (int r = 0; r < kTrainBatch; ++r) {
      for (int c = 0; c < kTrainHidden; ++c) hidden_t.at(c, r) = fw.hidden.at(r, c);
      for (int c = 0; c < kTrainIn; ++c) x_t.at(c, r) = x.at(r, c);
    }
    for (int r = 0; r < kTrainHidden; ++r) {
      for (int c = 0; c < kTrainClasses; ++c) w2_t.at(c, r) = w2.at(r, c);
    }
    store_bf16(ctx, w2_t);
    const Matrix g2 = gemm(ctx, gemm_name, hidden_t, dlogits);
    Matrix dhidden = gemm(ctx, gemm_name, dlogits, w2_t);
    for (int r = 0; r < kTrainBatch; ++r) {
      for (int c = 0; c < kTrainHidden; ++c) {
        const float p = fw.pre.at(r, c);
        const float inner = 0.7978845608f * (p + 0.044715f * p * p * p);
        const float t = std::tanh(inner);
        const float derivative =
            0.5f * (1 + t) + 0.5f * p * (1 - t * t) * 0.7978845608f * (1 + 3 * 0.044715f * p * p);
        dhidden.at(r, c) *= derivative;
      }
    }
    store_as(ctx, "gelu", dhidden);
    const Matrix g1 = gemm(ctx, gemm_name, x_t, dhidden);
    for (std::size_t i = 0; i < w1.data.size(); ++i) {
      v1.data[i] = kMomentum * v1.data[i] + g1.data[i];
      w1.data[i] -= kLearningRate * v1.data[i];
    }
    for (std::size_t i = 0; i < w2.data.size(); ++i) {
      v2.data[i] = kMomentum * v2.data[i] + g2.data[i];
      w2.data[i] -= kLearningRate * v2.data[i];
    }
    apply_kernel_fault(ctx, "sgd", w1);
    apply_kernel_fault(ctx, "sgd", w2);
    return loss;
  }

  double eval() {
    Matrix eval_x = random_matrix(kTrainEval, kTrainIn, 1.0, options.data_seed, kEvalData);
    store_bf16(ctx, eval_x);
    const std::vector<int> eval_labels = labels_for(eval_x);
    const Forward fw = forward(eval_x);
    int correct = 0;
    for (int r = 0; r < kTrainEval; ++r) {
      int best = 0;
      for (int c = 1; c < kTrainClasses; ++c) {
        if (fw.probs.at(r, c) > fw.probs.at(r, best)) best = c;
      }
      correct += best == eval_labels[static_cast<std::size_t>(r)] ? 1 : 0;
    }
    return static_cast<double>(correct) / kTrainEval;
  }

  ModelRunOptions options;
  KernelContext ctx;
  std::string gemm_name;
  Matrix teacher, w1, w2, v1, v2;  // v: momentum
  std::uint64_t sdc_stream = 100;
  std::uint64_t steps_done = 0;
};

TinyTrainer::TinyTrainer(const ModelSpec& spec, const ModelRunOptions& options)
    : state_(std::make_unique<State>(spec, options)) {}
TinyTrainer::~TinyTrainer() = default;
double TinyTrainer::step() { return state_->step(); }
double TinyTrainer::eval() { return state_->eval(); }

Result<ModelRun> run_model(const ModelSpec& spec, const ModelRunOptions& options) {
  if (spec.name == "mlp-bf16" || spec.name == "mlp-fp8") return run_mlp(spec, options);
  if (spec.name == "transformer-block-bf16" || spec.name == "transformer-block-fp8") {
    return run_transformer(spec, options);
  }
  if (spec.name == "train-tiny") return run_training(spec, options);
  return fail(Errc::not_found, fmt::format("no computation for model '{}'; see kiln-workload-model --list", spec.name));
}

std::vector<OutputCheck> output_checks(const ModelSpec& spec) {
  // The kernels' output rule (numerics::kernel_output_tolerance): bf16 outputs, fp8 models'
  // gemm inputs rounded to E4M3.
  const bool fp8 = spec.dtype != "bf16";
  const numerics::KernelTolerance rule = numerics::kernel_output_tolerance(fp8);
  auto check = [&](std::string name, int top_k) {
    OutputCheck c;
    c.name = std::move(name);
    c.options.dtype = DType::bf16;
    c.options.tolerance = numerics::Tolerance{rule.rtol, 0.0, 0.0};
    c.atol_rms_fraction = rule.atol_rms_fraction;
    c.options.top_k = top_k;
    if (top_k > 0) c.min_topk_agreement = fp8 ? 0.8 : 0.9;
    return c;
  };
  if (spec.kind == ModelKind::training) return {};
  if (spec.name.rfind("mlp-", 0) == 0) return {check("output", 0)};
  return {check("hidden", 0), check("logits", 5)};
}

numerics::CompareOptions tolerance_for(const OutputCheck& check, const numerics::Tensor& golden) {
  numerics::CompareOptions options = check.options;
  numerics::Tolerance tolerance = options.tolerance.value_or(numerics::default_tolerance(options.dtype));
  tolerance.atol = std::max(tolerance.atol, check.atol_rms_fraction * numerics::rms(golden));
  options.tolerance = tolerance;
  return options;
}

TrainingCheck check_training(const std::vector<LossPoint>& reference, double eval_reference,
                             const std::vector<LossPoint>& actual, double eval_score) {
  TrainingCheck check;
  check.eval_score = eval_score;
  check.eval_reference = eval_reference;
  std::vector<std::string> problems;
  if (reference.size() != actual.size()) {
    check.loss_curve_passed = false;
    problems.push_back(fmt::format("the loss curve has {} points, the reference {}", actual.size(), reference.size()));
  }
  const std::size_t n = std::min(reference.size(), actual.size());
  check.points_compared = static_cast<int>(n);
  check.points_allowed_outside = static_cast<int>(std::floor(kLossPointsAllowedOutside * static_cast<double>(n)));
  bool saw_nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    const double expected = reference[i].loss;
    const double got = actual[i].loss;
    if (!std::isfinite(got)) {
      saw_nan = true;
      ++check.points_outside_band;
      continue;
    }
    const double deviation = std::abs(got - expected) / std::max(std::abs(expected), 1e-12);
    check.max_relative_deviation = std::max(check.max_relative_deviation, deviation);
    if (deviation > kLossBandRelative || reference[i].step != actual[i].step) ++check.points_outside_band;
  }
  if (saw_nan) problems.push_back("the loss became NaN or infinite");
  if (saw_nan || check.points_outside_band > check.points_allowed_outside) {
    check.loss_curve_passed = false;
    problems.push_back(fmt::format("{} of {} loss points outside the {}% band (allowed {})", check.points_outside_band,
                                   n, kLossBandRelative * 100, check.points_allowed_outside));
  }
  check.eval_passed = std::isfinite(eval_score) && eval_score >= kEvalMinFractionOfReference * eval_reference;
  if (!check.eval_passed) {
    problems.push_back(fmt::format("eval score {:.4f} below {}% of the reference {:.4f}", eval_score,
                                   kEvalMinFractionOfReference * 100, eval_reference));
  }
  check.passed = check.loss_curve_passed && check.eval_passed;
  check.detail = problems.empty() ? "loss curve within the band and eval score reached" : fmt::format("{}", fmt::join(problems, "; "));
  return check;
}

}  // namespace kiln::sim::workloads
