// kiln stability: a long training run on a gang of whole nodes with stated failure criteria,
// reported as failures per 1000 chip-hours with exact Poisson intervals (docs/stability.md). The
// detectors run in each rank's workload while it trains; this submits the gang, waits, reports
// what the ranks saw and records the run with the gates it judged (a stability_run record), which
// the risk register reads and the qualifier pages from.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/stability/report.h"
#include "qualification/backends/switchover.h"
#include "cli/commands/all.h"
#include "cli/commands/qualification_options.h"
#include "cli/duration.h"
#include "cli/exit_codes.h"
#include "cli/ids.h"
#include "cli/text.h"
#include "records/change.h"
#include "qualification/shell/gang.h"
#include "client/records_client.h"
#include "qualification/stability_gates.h"

namespace kiln::cli {

namespace {

namespace st = kiln::stability;
namespace q = kiln::qualification;
namespace qs = kiln::qualification::shell;

constexpr auto kPoll = std::chrono::milliseconds(250);

Result<std::vector<protocol::NodeSummary>> list_nodes(Client& client) {
  auto nodes = expect_reply<protocol::NodeList>(client.request(protocol::ListNodes{}));
  if (!nodes) return tl::unexpected(nodes.error());
  return std::move(nodes->nodes);
}

// The most chips a node of `revision` (any when empty) has: a rank's share of the run.
Result<std::uint32_t> chips_per_node(Client& client, const std::string& revision) {
  auto nodes = list_nodes(client);
  if (!nodes) return tl::unexpected(nodes.error());
  std::uint32_t most = 0;
  for (const auto& n : *nodes) {
    if (revision.empty() || n.hardware_revision == revision) most = std::max(most, n.chips_total);
  }
  if (most == 0) {
    return fail(Errc::invalid_argument,
                fmt::format("the coordinator knows no node{}; check `kiln nodes` and --rev",
                            revision.empty() ? "" : " of revision " + revision));
  }
  return most;
}

// What one rank's job left: its stability object, or why there is none.
st::RankRun rank_run(const protocol::JobDetail& detail) {
  st::RankRun run;
  const auto parsed = nlohmann::json::parse(detail.result, nullptr, false);
  if (!detail.result.empty() && !parsed.is_discarded()) {
    if (auto read = st::rank_run_from_result(parsed)) {
      run = *read;
    } else {
      run.problem = read.error().message;
    }
  } else {
    run.problem = fmt::format("job {} ended {} without a result{}", detail.job.job_id,
                              protocol::enum_name(detail.job.state),
                              detail.job.detail.empty() ? "" : ": " + detail.job.detail);
  }
  run.job_id = detail.job.job_id;
  run.rank = detail.job.gang_rank;
  run.node_id = detail.job.node_id;
  return run;
}

// A run on the fleet, or with --episodes and --chip-hours, the rate and interval of counts
// given, with no coordinator.
class StabilityCommand : public Command {
 public:
  std::string name() const override { return "stability"; }
  std::string help() const override {
    return "a stability run: train a model on many chips for a duration, reporting failures per 1000 chip-hours";
  }
  void add_options(CLI::App& command) override {
    command.add_option("--model", model_,
                       "the training model: a model of the register's set (its workload trains, and the run is "
                       "recorded under its name), else the workload's own model (train-tiny on the simulated chip)");
    command.add_option("--chips", chips_, "chips in all: one node's worth or fewer, or whole nodes")
        ->check(CLI::Range(1, 64 * 64));
    command.add_option("--duration", duration_, "how long it trains, on the run's clock (24h, 90m)");
    command.add_option("--episodes", episodes_,
                       "no run: the rate and interval of this many failure episodes (one cause on one chip each) "
                       "counted elsewhere; with --chip-hours");
    command.add_option("--chip-hours", counted_chip_hours_, "no run: the exposure the --episodes were counted in")
        ->check(CLI::PositiveNumber);
    command.add_option("--confidence", confidence_,
                       "of the interval (overrides [run] confidence; 0.5 to 0.999, default 0.95)");
    command.add_option("--criteria", criteria_file_, "stability.toml: the failure criteria (default: the defaults)");
    command.add_option("--time-scale", time_scale_,
                       "run-clock seconds per wall second (overrides [run] time_scale; 1 on silicon)");
    command.add_option("--rev", revision_, "hardware revision (default: any)");
    command.add_option("--class", class_, "priority class of the run's lease and jobs")->capture_default_str();
    command.add_option("--workload", workload_, "the agents' workload that trains")->capture_default_str();
    command.add_option("--seed", seed_, "seed of the ranks (rank r gets seed + r)")->capture_default_str();
    command.add_option("--run-id", run_id_, "the id the run is recorded under (default: stability-L<lease id>)");
    add_register_option(command, register_path_);
  }
  Status check_arguments() override {
    if (episodes_ || counted_chip_hours_) {
      if (confidence_ > 0) criteria_.confidence = confidence_;
      if (!episodes_ || !counted_chip_hours_) {
        return fail(Errc::invalid_argument, "--episodes and --chip-hours go together: give both for the rate of "
                                            "counts, or neither for a run");
      }
      if (!model_.empty() || chips_ != 0 || !duration_.empty()) {
        return fail(Errc::invalid_argument,
                    "--episodes and --chip-hours give the rate of counts without a run: leave out --model, --chips "
                    "and --duration");
      }
      if (auto valid = st::validate(criteria_); !valid) {
        return fail(Errc::invalid_argument, "--confidence: " + valid.error().message);
      }
      return {};
    }
    for (const auto& [given, option] : {std::pair{!model_.empty(), "--model"}, std::pair{chips_ != 0, "--chips"},
                                        std::pair{!duration_.empty(), "--duration"}}) {
      if (!given) {
        return fail(Errc::invalid_argument, fmt::format("{} is required for a run (or give --episodes and "
                                                        "--chip-hours for the rate of counts)",
                                                        option));
      }
    }
    auto cls = parse_priority_class(class_);
    if (!cls) return tl::unexpected(cls.error());
    priority_class_ = *cls;
    auto duration_ms = parse_duration_ms(duration_, "--duration");
    if (!duration_ms) return tl::unexpected(duration_ms.error());
    hours_ = static_cast<double>(*duration_ms) / 3'600'000.0;
    if (!criteria_file_.empty()) {
      auto read = st::read_criteria_file(criteria_file_);
      if (!read) return fail(Errc::invalid_argument, read.error().message);
      criteria_ = *read;
    }
    if (time_scale_ > 0) criteria_.time_scale = time_scale_;
    if (confidence_ > 0) criteria_.confidence = confidence_;
    if (auto valid = st::validate(criteria_); !valid) {
      return fail(Errc::invalid_argument, "--time-scale or --confidence: " + valid.error().message);
    }
    return resolve_model();
  }
  int run(CommandContext& context) override {
    if (episodes_) {
      if (context.json()) {
        std::cout << st::rate_to_json(*episodes_, *counted_chip_hours_, criteria_.confidence).dump(2) << "\n";
      } else {
        std::cout << st::rate_to_text(*episodes_, *counted_chip_hours_, criteria_.confidence);
      }
      return kExitOk;
    }
    auto client = context.client();
    if (!client) return report(client.error());
    return run_with(**client, context);
  }

 private:
  int run_with(Client& client, CommandContext& context) {
    const TimeMs started_at_ms = wall_now_ms();
    auto per_node = chips_per_node(client, revision_);
    if (!per_node) return report(per_node.error());
    const std::uint32_t ranks = chips_ <= *per_node ? 1 : chips_ / *per_node;
    if (chips_ > *per_node && chips_ % *per_node != 0) {
      return report(Error{Errc::invalid_argument,
                          fmt::format("--chips {} is more than a node's {} chips and not whole nodes; give {} or {}",
                                      chips_, *per_node, (chips_ / *per_node) * *per_node,
                                      (chips_ / *per_node + 1) * *per_node)});
    }
    const protocol::SubmitJob job = rank_template(std::min(chips_, *per_node));
    auto lease = client.request(qs::gang_lease(job, static_cast<int>(ranks), revision_));
    if (!lease) return report(lease.error());
    const std::uint64_t lease_id = qs::lease_id_of(*lease);
    if (lease_id == 0) {
      return report(Error{Errc::conflict, fmt::format("the coordinator refused a lease of {} whole node{} ({})", ranks,
                                                      ranks == 1 ? "" : "s", protocol::type_name(*lease))});
    }
    const bool quiet = context.json();
    if (!quiet) {
      std::cerr << fmt::format("lease L{}: {} whole node{} for a stability run of {} on {} chips for {} (run clock "
                               "x{:g}), requested\n",
                               lease_id, ranks, ranks == 1 ? "" : "s", model_, chips_, duration_,
                               criteria_.time_scale);
    }
    auto job_ids = start_gang(client, lease_id, job, ranks, quiet);
    if (!job_ids) {
      (void)client.request(protocol::ReleaseLease{lease_id});
      return report(job_ids.error());
    }
    auto ended = wait_for_ranks(client, *job_ids);
    (void)client.request(protocol::ReleaseLease{lease_id});
    if (!ended) return report(ended.error());
    std::vector<st::RankRun> runs;
    for (const auto& detail : *ended) runs.push_back(rank_run(detail));
    const st::StabilityReport result = st::make_report(model_, chips_, hours_, criteria_, std::move(runs));
    const std::string run_id = run_id_.empty() ? fmt::format("stability-L{}", lease_id) : run_id_;
    q::StabilityRunFacts facts{run_id, model_, revision_, started_at_ms, wall_now_ms(), {}};
    auto recorded = nodes_of_run(client, result, facts);
    nlohmann::json document = q::stability_run_document(result, facts);
    document["lease_id"] = lease_id;
    document["job_ids"] = *job_ids;
    if (recorded) recorded = record(client, document, run_id);
    if (context.json()) {
      nlohmann::json out = document;
      out["recorded"] = recorded.has_value();
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << st::to_text(result);
    }
    // Unrecorded, the run closes no gap of the register: that is the command's failure to say.
    if (!recorded) return report(recorded.error());
    if (!quiet) std::cerr << fmt::format("recorded as stability run {}: `kiln risks` reads its gates\n", run_id);
    return result.passed ? kExitOk : kExitFailed;
  }

  protocol::SubmitJob rank_template(std::uint32_t chips) const {
    protocol::SubmitJob job;
    job.workload = workload_;
    job.args = {"--model", workload_model_, "--stability-hours", fmt::format("{}", hours_), "--stability-criteria",
                st::criteria_to_json(criteria_).dump()};
    if (data_seed_) job.args.insert(job.args.end(), {"--data-seed", std::to_string(*data_seed_)});
    job.chips = chips;
    job.hardware_revision = revision_;
    job.priority_class = priority_class_;
    // A stability run is one measurement: a rank lost is reported, not run again.
    job.max_attempts = 1;
    job.seed = seed_;
    // The run's wall time, a hang's detection after it, and a minute to start and stop.
    const double wall_s = (hours_ * 3600 + criteria_.hang_minutes * 60) / criteria_.time_scale + 60;
    job.timeout_ms = static_cast<std::uint32_t>(std::min(wall_s * 1000, 4.0e9));
    job.config_hash = qualification::sha256_hex(fmt::format("{}\n{}", job.workload, fmt::join(job.args, "\n")));
    return job;
  }

  // Waits for the lease and submits the ranks in it.
  Result<std::vector<std::uint64_t>> start_gang(Client& client, std::uint64_t lease_id, const protocol::SubmitJob& job,
                                                std::uint32_t ranks, bool quiet) {
    while (true) {
      auto leases = expect_reply<protocol::LeaseList>(client.request(protocol::ListLeases{true}));
      if (!leases) return tl::unexpected(leases.error());
      const auto lease = std::find_if(leases->leases.begin(), leases->leases.end(),
                                      [&](const protocol::LeaseSummary& l) { return l.lease_id == lease_id; });
      if (lease == leases->leases.end() || lease->state == protocol::LeaseState::ended) {
        return fail(Errc::conflict, fmt::format("lease L{} ended before the run started{}; run it again", lease_id,
                                                lease == leases->leases.end() ? "" : ": " + lease->detail));
      }
      if (lease->state == protocol::LeaseState::granted) break;
      std::this_thread::sleep_for(kPoll);
    }
    protocol::SubmitGang gang{lease_id, {}};
    for (std::uint32_t rank = 0; rank < ranks; ++rank) gang.jobs.push_back(qs::rank_job(job, static_cast<int>(rank)));
    auto accepted = expect_reply<protocol::GangAccepted>(client.request(std::move(gang)));
    if (!accepted) return tl::unexpected(accepted.error());
    if (!quiet) {
      std::cerr << fmt::format("lease L{}: granted; jobs {} train, ranks 0 to {}\n", lease_id,
                               fmt::join(accepted->job_ids, ", "), ranks - 1);
    }
    return accepted->job_ids;
  }

  static Result<std::vector<protocol::JobDetail>> wait_for_ranks(Client& client,
                                                                 const std::vector<std::uint64_t>& job_ids) {
    std::vector<protocol::JobDetail> ended;
    for (std::uint64_t id : job_ids) {
      while (true) {
        auto detail = expect_reply<protocol::JobDetail>(client.request(protocol::GetJob{id}));
        if (!detail) return tl::unexpected(detail.error());
        if (protocol::is_terminal(detail->job.state)) {
          ended.push_back(std::move(*detail));
          break;
        }
        std::this_thread::sleep_for(kPoll);
      }
    }
    return ended;
  }

  // A model of the register's set trains its workload's model with its data seed, and the run is
  // recorded under the set's name, the one the register's gates name.
  Status resolve_model() {
    workload_model_ = model_;
    fill_from_environment(register_path_, "KILN_RISKS");
    if (register_path_.empty()) return {};
    auto loaded = load_register(register_path_);
    if (!loaded) return tl::unexpected(loaded.error());
    const q::QualificationModel* model = loaded->set.find(model_);
    if (model == nullptr) {
      std::cerr << fmt::format("kiln: note: {} is not a model of {}: the workload trains its own model {}, and no "
                               "gate of the register names it\n",
                               model_, loaded->reg.model_set.string(), model_);
      return {};
    }
    if (model->workload) workload_model_ = *model->workload;
    data_seed_ = model->data_seed;
    return {};
  }

  // The ranks' nodes' revision, and each node's backend as its driver declares it at the end of the run.
  static Status nodes_of_run(Client& client, const st::StabilityReport& result, q::StabilityRunFacts& facts) {
    auto nodes = list_nodes(client);
    if (!nodes) return tl::unexpected(nodes.error());
    for (const auto& rank : result.ranks) {
      for (const auto& n : *nodes) {
        if (n.node_id != rank.node_id) continue;
        facts.revision = n.hardware_revision;
        const auto backend = backends::declared_backend(n.labels);
        facts.node_backends[n.node_id] = backend ? std::string(kiln::enum_name(*backend)) : "unknown";
      }
    }
    return {};
  }

  // The run on the coordinator, with the gates it judged: the register reads it.
  static Status record(Client& client, const nlohmann::json& document, const std::string& run_id) {
    auto recorded = qs::record_run(client, run_id, document, protocol::RecordKind::stability_run);
    if (!recorded) {
      return fail(recorded.error().code,
                  fmt::format("the stability run was not recorded, so the risk register does not see it: {}{}",
                              recorded.error().message,
                              recorded.error().code == Errc::unauthorized
                                  ? "; a run that counts for the gates is run with a CI or ops key"
                                  : ""));
    }
    return {};
  }

  std::string model_;
  std::string workload_model_;
  std::optional<std::uint64_t> data_seed_;
  std::string run_id_;
  std::string register_path_;
  std::uint32_t chips_ = 0;
  std::string duration_;
  std::optional<std::uint64_t> episodes_;
  std::optional<double> counted_chip_hours_;
  double confidence_ = 0;
  double hours_ = 0;
  std::string criteria_file_;
  double time_scale_ = 0;
  st::StabilityCriteria criteria_;
  std::string revision_;
  std::string class_ = "release";
  protocol::PriorityClass priority_class_ = protocol::PriorityClass::release;
  std::string workload_ = "model";
  std::uint64_t seed_ = 1;
};

}  // namespace

void add_stability_command(CommandList& commands) { commands.push_back(std::make_unique<StabilityCommand>()); }

}  // namespace kiln::cli
