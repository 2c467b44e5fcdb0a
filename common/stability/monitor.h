// The detectors of a stability run, fed while the run goes: the training loop reports each step
// (its loss and throughput) and the chips' error counters, and a watchdog asks whether progress
// stopped. Each failure comes with its evidence (step, time, chip, value, threshold). Pure: time
// is the run's own clock in seconds since it started (simulated seconds on the simulated chip).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/enum_names.h"
#include "common/error.h"
#include "common/stability/criteria.h"

namespace kiln::stability {

enum class FailureKind { nan, loss_spike, hang, throughput_decay, ecc, link };
constexpr EnumTable<FailureKind, 6> enum_names(FailureKind) {
  return {{
      {FailureKind::nan, "nan"},  // NaN or inf in the loss
      {FailureKind::loss_spike, "loss_spike"},
      {FailureKind::hang, "hang"},
      {FailureKind::throughput_decay, "throughput_decay"},
      {FailureKind::ecc, "ecc"},
      {FailureKind::link, "link"},
  }};
}

// Whether the run can go on after this kind: a diverged loss, a hung chip, an uncorrectable
// memory error or a lost link end it, as they end a real training job; a loss spike and a
// throughput decay are recorded and the run continues.
bool ends_run(FailureKind kind);

struct Failure {
  FailureKind kind = FailureKind::nan;
  std::uint64_t step = 0;            // the step it was seen at (the last step done, for a hang)
  double time_s = 0;                 // run time when it was seen
  std::optional<std::uint32_t> chip; // the chip it is on, when it is one chip's
  double value = 0;                  // what was measured (loss, minutes without progress, ...)
  double threshold = 0;              // what it was judged against
  std::string detail;                // the evidence in words
};

nlohmann::json to_json(const Failure& failure);
Result<Failure> failure_from_json(const nlohmann::json& json);

struct StepReport {
  std::uint64_t step = 0;
  double time_s = 0;      // when the step ended
  double loss = 0;
  double throughput = 0;  // items per second of the step
};

struct DeviceReading {
  std::uint32_t chip = 0;
  std::uint64_t ecc_uncorrected = 0;  // the chip's counter, as the driver reports it
  bool link_up = true;
};

class StabilityMonitor {
 public:
  explicit StabilityMonitor(StabilityCriteria criteria);

  // The chips' counters, read before a step; the first reading of a chip is its baseline.
  std::vector<Failure> observe_devices(std::uint64_t step, double time_s, const std::vector<DeviceReading>& readings);
  std::vector<Failure> observe_step(const StepReport& step);
  // A hang when no step ended for the criteria's minutes by now_s; blocked_chip is the chip
  // the run was waiting on, when known.
  std::optional<Failure> check_progress(double now_s, std::optional<std::uint32_t> blocked_chip);

  // A failure that ends the run was seen: nothing more is judged.
  bool ended() const { return ended_; }
  const std::vector<Failure>& failures() const { return failures_; }
  std::uint64_t last_step() const { return last_step_; }
  double last_step_time_s() const { return last_step_time_s_; }
  // Median throughput of the first window and of the latest window judged; 0 before there is one.
  double first_window_throughput() const { return first_window_median_; }
  double latest_window_throughput() const { return latest_window_median_; }

 private:
  std::vector<Failure> record(Failure failure);
  std::optional<Failure> check_loss(const StepReport& step);
  std::optional<Failure> check_throughput(const StepReport& step);

  StabilityCriteria criteria_;
  bool ended_ = false;
  std::vector<Failure> failures_;
  std::uint64_t last_step_ = 0;
  double last_step_time_s_ = 0;
  std::map<std::uint32_t, std::uint64_t> ecc_baseline_;
  std::deque<double> recent_losses_;    // the last smoothing_steps losses
  std::deque<double> recent_smoothed_;  // their averages over the last window_steps steps
  bool in_spike_ = false;  // one failure per excursion above the band
  std::vector<double> first_window_;
  double first_window_median_ = 0;
  std::vector<double> current_window_;
  double current_window_end_s_ = 0;
  double latest_window_median_ = 0;
  bool decay_seen_ = false;  // one failure per run
};

double median(std::vector<double> values);

}  // namespace kiln::stability
