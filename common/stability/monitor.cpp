#include "common/stability/monitor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::stability {

bool ends_run(FailureKind kind) {
  return kind == FailureKind::nan || kind == FailureKind::hang || kind == FailureKind::ecc ||
         kind == FailureKind::link;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  if (values.size() % 2 == 1) return *middle;
  return (*middle + *std::max_element(values.begin(), middle)) / 2;
}

namespace {

// JSON has no NaN: a non-finite value travels as the workload contract writes it.
nlohmann::json number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

std::optional<double> number_from(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value == "nan") return std::nan("");
  if (value == "inf") return INFINITY;
  if (value == "-inf") return -INFINITY;
  return std::nullopt;
}

}  // namespace

nlohmann::json to_json(const Failure& f) {
  return {{"kind", enum_name(f.kind)},
          {"step", f.step},
          {"time_s", f.time_s},
          {"chip", f.chip ? nlohmann::json(*f.chip) : nlohmann::json(nullptr)},
          {"value", number(f.value)},
          {"threshold", number(f.threshold)},
          {"ends_run", ends_run(f.kind)},
          {"detail", f.detail}};
}

Result<Failure> failure_from_json(const nlohmann::json& json) {
  const auto bad = [](std::string_view what) {
    return fail(Errc::bad_message, fmt::format("a stability failure's {} is missing or malformed", what));
  };
  if (!json.is_object()) return bad("object");
  Failure f;
  const auto kind = enum_from_name<FailureKind>(json.value("kind", ""));
  if (!kind) return bad("kind");
  f.kind = *kind;
  if (!json.contains("step") || !json["step"].is_number_unsigned()) return bad("step");
  f.step = json["step"].get<std::uint64_t>();
  if (!json.contains("time_s") || !json["time_s"].is_number()) return bad("time_s");
  f.time_s = json["time_s"].get<double>();
  if (json.contains("chip") && json["chip"].is_number_unsigned()) f.chip = json["chip"].get<std::uint32_t>();
  const auto value = number_from(json.value("value", nlohmann::json()));
  const auto threshold = number_from(json.value("threshold", nlohmann::json()));
  if (!value) return bad("value");
  if (!threshold) return bad("threshold");
  f.value = *value;
  f.threshold = *threshold;
  f.detail = json.value("detail", "");
  return f;
}

StabilityMonitor::StabilityMonitor(StabilityCriteria criteria) : criteria_(criteria) {
  current_window_end_s_ = 2 * criteria_.decay_window_minutes * 60;
}

std::vector<Failure> StabilityMonitor::record(Failure failure) {
  if (ends_run(failure.kind)) ended_ = true;
  failures_.push_back(failure);
  return {std::move(failure)};
}

std::vector<Failure> StabilityMonitor::observe_devices(std::uint64_t step, double time_s,
                                                       const std::vector<DeviceReading>& readings) {
  std::vector<Failure> seen;
  if (ended_) return seen;
  for (const auto& r : readings) {
    const auto [baseline, first] = ecc_baseline_.emplace(r.chip, r.ecc_uncorrected);
    const std::uint64_t new_errors = r.ecc_uncorrected - std::min(r.ecc_uncorrected, baseline->second);
    if (new_errors > criteria_.ecc_uncorrected_max) {
      auto f = record({FailureKind::ecc, step, time_s, r.chip, static_cast<double>(new_errors),
                       static_cast<double>(criteria_.ecc_uncorrected_max),
                       fmt::format("chip {} reported {} uncorrected ECC error{} since the run started (at most {} "
                                   "allowed)",
                                   r.chip, new_errors, new_errors == 1 ? "" : "s", criteria_.ecc_uncorrected_max)});
      seen.insert(seen.end(), f.begin(), f.end());
      return seen;
    }
    if (criteria_.link_down_fails && !r.link_up) {
      auto f = record({FailureKind::link, step, time_s, r.chip, 0, 1,
                       fmt::format("chip {}'s chip-to-chip link is down: the collectives of the step fail", r.chip)});
      seen.insert(seen.end(), f.begin(), f.end());
      return seen;
    }
  }
  return seen;
}

std::optional<Failure> StabilityMonitor::check_loss(const StepReport& step) {
  if (!std::isfinite(step.loss)) {
    return Failure{FailureKind::nan, step.step, step.time_s, std::nullopt, step.loss, 0,
                   fmt::format("the loss at step {} is {}", step.step, std::isnan(step.loss) ? "NaN" : "infinite")};
  }
  recent_losses_.push_back(step.loss);
  if (recent_losses_.size() > criteria_.loss_spike_smoothing_steps) recent_losses_.pop_front();
  if (recent_losses_.size() < criteria_.loss_spike_smoothing_steps) return std::nullopt;
  double smoothed = 0;
  for (double loss : recent_losses_) smoothed += loss;
  smoothed /= static_cast<double>(recent_losses_.size());
  std::optional<Failure> spike;
  if (recent_smoothed_.size() == criteria_.loss_spike_window_steps) {
    const double reference = median({recent_smoothed_.begin(), recent_smoothed_.end()});
    const double band = reference * (1 + criteria_.loss_spike_band_relative);
    const bool above = smoothed > band;
    if (above && !in_spike_) {
      spike = Failure{FailureKind::loss_spike, step.step, step.time_s, std::nullopt, smoothed, band,
                      fmt::format("the loss averaged over the {} steps to step {} is {:.4g} (this step's {:.4g}), "
                                  "above the band {:.4g}: {:.0f}% over its median {:.4g} of the {} steps before",
                                  criteria_.loss_spike_smoothing_steps, step.step, smoothed, step.loss, band,
                                  100 * criteria_.loss_spike_band_relative, reference,
                                  criteria_.loss_spike_window_steps)};
    }
    in_spike_ = above;
    recent_smoothed_.pop_front();
  }
  recent_smoothed_.push_back(smoothed);
  return spike;
}

std::optional<Failure> StabilityMonitor::check_throughput(const StepReport& step) {
  const double window_s = criteria_.decay_window_minutes * 60;
  if (step.time_s <= window_s) {
    first_window_.push_back(step.throughput);
    return std::nullopt;
  }
  if (first_window_median_ == 0 && !first_window_.empty()) first_window_median_ = median(first_window_);
  // Later windows are whole, back to back after the first: each is judged once it is complete.
  if (step.time_s > current_window_end_s_) {
    if (!current_window_.empty()) latest_window_median_ = median(current_window_);
    current_window_.clear();
    while (current_window_end_s_ < step.time_s) current_window_end_s_ += window_s;
    if (!decay_seen_ && first_window_median_ > 0 && latest_window_median_ > 0 &&
        latest_window_median_ < first_window_median_ * (1 - criteria_.decay_max_drop)) {
      decay_seen_ = true;
      const double drop = 1 - latest_window_median_ / first_window_median_;
      const double floor = first_window_median_ * (1 - criteria_.decay_max_drop);
      return Failure{FailureKind::throughput_decay, step.step, step.time_s, std::nullopt, latest_window_median_, floor,
                     fmt::format("the median throughput of the {:.0f} minutes up to step {} is {:.4g}/s, {:.1f}% "
                                 "below the first {:.0f} minutes' {:.4g}/s (at most {:.1f}% allowed)",
                                 criteria_.decay_window_minutes, step.step, latest_window_median_, 100 * drop,
                                 criteria_.decay_window_minutes, first_window_median_,
                                 100 * criteria_.decay_max_drop)};
    }
  }
  current_window_.push_back(step.throughput);
  return std::nullopt;
}

std::vector<Failure> StabilityMonitor::observe_step(const StepReport& step) {
  std::vector<Failure> seen;
  if (ended_) return seen;
  last_step_ = step.step;
  last_step_time_s_ = step.time_s;
  for (auto failure : {check_loss(step), check_throughput(step)}) {
    if (!failure || ended_) continue;
    auto f = record(std::move(*failure));
    seen.insert(seen.end(), f.begin(), f.end());
  }
  return seen;
}

std::optional<Failure> StabilityMonitor::check_progress(double now_s, std::optional<std::uint32_t> blocked_chip) {
  if (ended_) return std::nullopt;
  const double idle_minutes = (now_s - last_step_time_s_) / 60;
  if (idle_minutes <= criteria_.hang_minutes) return std::nullopt;
  Failure f{FailureKind::hang, last_step_, now_s, blocked_chip, idle_minutes, criteria_.hang_minutes,
            fmt::format("no step for {:.1f} minutes after step {} (at most {:.1f} allowed){}", idle_minutes, last_step_,
                        criteria_.hang_minutes,
                        blocked_chip ? fmt::format("; the run was waiting on chip {}", *blocked_chip) : "")};
  record(f);
  return f;
}

}  // namespace kiln::stability
