// One run's page: the verdict first, then the bundle, the models' table, the tickets, and each
// model's evidence with its plots.
#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report/evidence_plots.h"
#include "report/html.h"
#include "report/page_parts.h"
#include "report/pages.h"
#include "report/report_fields.h"

namespace kiln::report {

namespace {

// The stack's layers in the order they build on each other; versions the bundle names beyond
// these follow in its order.
const std::vector<std::string> kLayers = {"framework", "compiler", "kernels", "runtime", "driver", "firmware"};

std::string short_bundle(const std::string& id) { return id.substr(0, 12); }

std::string optional_percent(const Json& value) {
  const auto number = finite(value);
  return number ? percent_text(*number) : "unbounded";
}

// "-3.05% (99.9% interval -3.90% .. -2.20%), p 1.2e-05, 10 vs 10 samples"
std::string comparison_text(const Json& comparison, const Json& p_value, std::string_view p_note) {
  const auto shift = number_of(comparison, "relative_shift");
  const Json& interval = member(comparison, "relative_ci");
  const auto confidence = number_of(comparison, "ci_confidence");
  const auto p = finite(p_value);
  return fmt::format("{} ({}% interval {} .. {}), p {}{}, {} vs {} samples", shift ? percent_text(*shift) : "no shift",
                     confidence ? fmt::format("{:.1f}", *confidence * 100) : "?",
                     optional_percent(interval.is_array() && interval.size() == 2 ? interval[0] : Json()),
                     optional_percent(interval.is_array() && interval.size() == 2 ? interval[1] : Json()),
                     p ? fmt::format("{:.2g}", *p) : "?", p_note, integer_of(comparison, "n_candidate"),
                     integer_of(comparison, "n_baseline"));
}

std::string performance_cell(const Json& model, bool has_baseline) {
  const Json& performance = member(model, "performance");
  if (!performance.is_object()) return has_baseline ? "not judged" : "no baseline on this revision";
  if (!text_of(performance, "error").empty()) return "could not be compared: " + escape(text_of(performance, "error"));
  std::string out;
  if (member(performance, "initial").is_object()) {
    out = escape(comparison_text(member(performance, "initial"), member(performance, "initial_adjusted_p_value"),
                                 " (BH-adjusted)"));
  }
  if (member(performance, "confirmation").is_object()) {
    const Json& confirmation = member(performance, "confirmation");
    out += "<br>rerun: " + escape(comparison_text(confirmation, member(confirmation, "p_value"), ""));
  }
  if (flag_of(performance, "regression_confirmed")) out += "<br>regression confirmed by the rerun";
  if (flag_of(performance, "regression_unconfirmed")) out += "<br>the rerun did not confirm the first regression";
  return out.empty() ? "not judged yet" : out;
}

std::string correctness_cell(const Json& model) {
  const std::string verdict = text_of(model, "verdict");
  const Json& loss = member(member(member(model, "training"), "verdict"), "loss_curve");
  std::string training;
  if (loss.is_object()) {
    training = fmt::format("loss curve {}: {} of {} points outside the band ({} allowed), moving average {}",
                           flag_of(loss, "passed") ? "passed" : "FAILED", integer_of(loss, "points_outside_band"),
                           integer_of(loss, "points_compared"), integer_of(loss, "points_allowed_outside"),
                           flag_of(loss, "moving_average_passed") ? "within its band" : "OUTSIDE its band");
  }
  std::string outputs;
  if (verdict == "correctness_regression") outputs = "FAILED on every node it ran on";
  else if (verdict == "hardware_suspect") outputs = "FAILED on one node, passed on another";
  else if (verdict == "flaky") outputs = "reruns disagree (flaky)";
  else if (verdict == "skipped") outputs = "not run";
  else if (verdict == "error") outputs = "not measured";
  else if (verdict == "pending") outputs = "pending";
  else outputs = "passed";
  return escape(training.empty() ? outputs : outputs + "; " + training);
}

std::string eval_text(const Json& eval) {
  const auto score = number_of(eval, "score");
  const auto required = number_of(eval, "required");
  const auto reference = number_of(eval, "reference");
  const auto fraction = number_of(eval, "fraction_of_reference");
  return fmt::format("{} {} {} {} required ({} of the reference {})", flag_of(eval, "passed") ? "\u2713 passed:" : "\u2717 FAILED:",
                     score ? number_text(*score) : "no score", flag_of(eval, "passed") ? "\u2265" : "<",
                     required ? number_text(*required) : "?",
                     fraction ? fmt::format("{:.1f}%", *fraction * 100) : "?",
                     reference ? number_text(*reference) : "?");
}

std::string eval_cell(const Json& model) {
  const Json& training = member(model, "training");
  if (!training.is_object()) return "";
  const Json& eval = member(member(training, "verdict"), "eval");
  if (!eval.is_object()) return "no eval";
  return escape(eval_text(eval));
}

class RunPage {
 public:
  RunPage(const Json& report, std::span<const RunDigest> history) : report_(report) {
    const TimeMs started = integer_of(report, "started_at_ms");
    const std::string run_id = text_of(report, "run_id");
    std::vector<RunDigest> earlier;
    for (const RunDigest& run : history) {
      if (run.run_id != run_id && (started == 0 || run.started_at_ms <= started)) earlier.push_back(run);
    }
    histories_ = histories_of(earlier);
    const Json& tickets = items(report, "tickets");
    for (std::size_t i = 0; i < tickets.size(); ++i) ticket_anchor_[text_of(tickets[i], "id")] = i;
  }

  std::string render() const {
    const RunVerdict verdict = run_verdict(report_);
    std::string out = page_start(fmt::format("kiln {} {}: {}", text_of(report_, "tier"), text_of(report_, "run_id"),
                                             verdict.word));
    out += fmt::format("<nav><a href=\"index.html\">All runs</a> &middot; <a href=\"{}\">This report as JSON</a></nav>\n",
                       escape(run_json_name(text_of(report_, "run_id"))));
    out += verdict_section(verdict) + bundle_section() + models_section() + tickets_section() + details_section() +
           reproducibility_section();
    out += fmt::format("<footer><p>The report as JSON is <code>{}</code> beside this page where the qualifier writes "
                       "the pages; <code>kiln run {} --json</code> prints it anywhere.</p></footer>\n",
                       escape(run_json_name(text_of(report_, "run_id"))), escape(text_of(report_, "run_id")));
    return out + page_end();
  }

 private:
  std::string verdict_section(const RunVerdict& verdict) const {
    const TimeMs started = integer_of(report_, "started_at_ms");
    const TimeMs finished = integer_of(report_, "finished_at_ms");
    std::string out = fmt::format(
        "<section class=\"verdict {}\" id=\"verdict\">\n<h1><span aria-hidden=\"true\">{}</span> {}: {} {}</h1>\n"
        "<p class=\"why\">{}</p>\n<p>",
        run_verdict_class(verdict.word), run_verdict_symbol(verdict.word), escape(verdict.word), escape(text_of(report_, "tier")),
        escape(text_of(report_, "run_id")), escape(verdict.reason));
    std::vector<std::string> facts;
    if (started > 0) facts.push_back("started " + utc_time(started));
    if (flag_of(report_, "finished") && finished > 0) {
      facts.push_back("finished " + utc_time(finished));
      if (started > 0) facts.push_back("took " + duration_text(finished - started));
    }
    facts.push_back(fmt::format("{} jobs started", integer_of(report_, "jobs_started")));
    if (integer_of(report_, "deadline_ms") > 0) {
      const Json& met = member(report_, "met_deadline");
      facts.push_back(fmt::format("deadline {}{}", utc_time(integer_of(report_, "deadline_ms")),
                                  met.is_boolean() ? (met.get<bool>() ? ": met" : ": MISSED") : ""));
    }
    out += escape(fmt::format("{}", fmt::join(facts, " \u00B7 "))) + "</p>\n";
    // The waivers the verdict relies on, each as `kiln waivers` says it (docs/risks.md).
    const Json& waivers = items(report_, "waivers");
    if (!waivers.empty()) {
      out += "<ul class=\"waivers\">\n";
      for (const Json& waiver : waivers) {
        out += fmt::format("<li>Gate {} {} ({}): {}</li>\n", escape(text_of(waiver, "model")),
                           escape(text_of(waiver, "metric")), escape(text_of(waiver, "scope")),
                           escape(text_of(waiver, "text")));
      }
      out += "</ul>\n";
    }
    if (!text_of(report_, "summary").empty()) {
      out += fmt::format("<details><summary>Summary as <code>kiln run</code> prints it</summary><pre>{}</pre></details>\n",
                         escape(text_of(report_, "summary")));
    }
    return out + "</section>\n";
  }

  std::string bundle_section() const {
    std::string out = "<section id=\"bundle\">\n<h2>Bundle</h2>\n";
    const Json& candidate = member(report_, "candidate_bundle");
    if (!candidate.is_object()) {
      return out + fmt::format("<p>Candidate bundle <code>{}</code>. This report does not hold its versions: "
                               "<code>kiln bundle show {}</code> prints them.</p>\n</section>\n",
                               escape(text_of(report_, "candidate_bundle_id")),
                               escape(short_bundle(text_of(report_, "candidate_bundle_id"))));
    }
    std::vector<std::pair<std::string, const Json*>> columns = {{"candidate " + short_bundle(text_of(candidate, "id")), &candidate}};
    const Json& baselines = member(report_, "baseline_bundles");
    if (baselines.is_object()) {
      for (const auto& [revision, bundle] : baselines.items()) {
        columns.emplace_back(fmt::format("baseline on {} {}", revision, short_bundle(text_of(bundle, "id"))), &bundle);
      }
    }
    std::vector<std::string> rows = kLayers;
    if (member(candidate, "versions").is_object()) {
      for (const auto& [layer, version] : member(candidate, "versions").items()) {
        if (std::find(rows.begin(), rows.end(), layer) == rows.end()) rows.push_back(layer);
      }
    }
    out += "<table>\n<thead><tr><th scope=\"col\">layer</th>";
    for (const auto& [name, bundle] : columns) out += fmt::format("<th scope=\"col\">{}</th>", escape(name));
    out += "</tr></thead>\n<tbody>\n";
    const auto version_of = [](const Json& bundle, const std::string& layer) {
      return layer == "model configs" ? text_of(bundle, "model_configs") : text_of(member(bundle, "versions"), layer);
    };
    rows.push_back("model configs");
    for (const auto& layer : rows) {
      const std::string mine = version_of(candidate, layer);
      out += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td>", escape(layer), escape(mine));
      for (std::size_t c = 1; c < columns.size(); ++c) {
        const std::string theirs = version_of(*columns[c].second, layer);
        out += theirs == mine ? fmt::format("<td>{}</td>", escape(theirs))
                              : fmt::format("<td class=\"changed\">{} <small>(differs)</small></td>", escape(theirs));
      }
      out += "</tr>\n";
    }
    out += fmt::format("</tbody>\n</table>\n<p>Hardware revisions: {}. Bundle id <code>{}</code>.",
                       escape(fmt::format("{}", fmt::join(texts(member(candidate, "hardware_revisions")), ", "))),
                       escape(text_of(candidate, "id")));
    // A report holds the count and the last change; one from before, the bundle's whole list.
    const auto changes = texts(member(candidate, "changes"));
    const auto count = number_of(candidate, "change_count");
    const std::string last = changes.empty() ? text_of(candidate, "last_change") : changes.back();
    if (count || !changes.empty()) {
      out += fmt::format(" {} changes, the last <code>{}</code>.",
                         count ? static_cast<std::size_t>(*count) : changes.size(), escape(last));
    }
    return out + "</p>\n</section>\n";
  }

  std::string ticket_links(const Json& model) const {
    std::vector<std::string> links;
    for (const auto& id : texts(member(model, "ticket_ids"))) {
      const auto it = ticket_anchor_.find(id);
      links.push_back(it == ticket_anchor_.end() ? escape(id)
                                                 : fmt::format("<a href=\"#ticket-{}\">{}</a>", it->second, escape(id)));
    }
    return fmt::format("{}", fmt::join(links, "<br>"));
  }

  bool has_baseline(const Json& model) const {
    return !text_of(member(report_, "baseline_bundle_ids"), text_of(model, "revision")).empty();
  }

  std::string models_section() const {
    const Json& models = items(report_, "models");
    std::string out = fmt::format("<section id=\"models\">\n<h2>Models ({} model runs)</h2>\n", models.size());
    if (models.empty()) return out + "<p>No model was run.</p>\n</section>\n";
    out += "<table>\n<thead><tr><th scope=\"col\">model</th><th scope=\"col\">revision</th><th scope=\"col\">verdict</th>"
           "<th scope=\"col\">correctness</th><th scope=\"col\">performance (throughput, candidate vs baseline)</th>"
           "<th scope=\"col\">eval (training)</th><th scope=\"col\">tickets</th><th scope=\"col\">owner</th></tr></thead>\n<tbody>\n";
    for (std::size_t i = 0; i < models.size(); ++i) {
      const Json& model = models[i];
      out += fmt::format("<tr><td><a href=\"#model-{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         i, escape(text_of(model, "model")), escape(text_of(model, "revision")),
                         model_verdict_html(text_of(model, "verdict")) + waived_note(model), correctness_cell(model),
                         performance_cell(model, has_baseline(model)), eval_cell(model), ticket_links(model),
                         escape(text_of(model, "owner_team")));
    }
    return out + "</tbody>\n</table>\n</section>\n";
  }

  // " (waived by X until T: reason)" under a model's verdict that a waiver let through.
  static std::string waived_note(const Json& model) {
    std::string out;
    for (const Json& waiver : items(model, "waivers")) out += "<br>" + escape(text_of(waiver, "text"));
    return out;
  }

  std::string tickets_section() const {
    const Json& tickets = items(report_, "tickets");
    if (tickets.empty()) return "";
    std::string out = fmt::format("<section id=\"tickets\">\n<h2>Tickets ({})</h2>\n<p>Their state is kept by the "
                                  "coordinator: <code>kiln tickets</code>, <code>kiln ticket ack ID</code>.</p>\n",
                                  tickets.size());
    for (std::size_t i = 0; i < tickets.size(); ++i) {
      const Json& ticket = tickets[i];
      out += fmt::format(
          "<article id=\"ticket-{}\">\n<h3>{}: {}</h3>\n<table><tbody>"
          "<tr><th scope=\"row\">kind</th><td>{}</td></tr><tr><th scope=\"row\">team</th><td>{}</td></tr>"
          "<tr><th scope=\"row\">culprit</th><td>{}</td></tr><tr><th scope=\"row\">layer</th><td>{}</td></tr>"
          "<tr><th scope=\"row\">filed</th><td>{}</td></tr></tbody></table>\n"
          "<details><summary>Evidence</summary><pre>{}</pre></details>\n</article>\n",
          i, escape(text_of(ticket, "id")), escape(text_of(ticket, "title")), escape(text_of(ticket, "kind")),
          escape(text_of(ticket, "team")), escape(text_of(ticket, "culprit")), escape(text_of(ticket, "layer")),
          escape(utc_time(integer_of(ticket, "created_at_ms"))), escape(member(ticket, "evidence").dump(2, ' ', false, Json::error_handler_t::replace)));
    }
    return out + "</section>\n";
  }

  std::string performance_details(const Json& model, std::size_t i) const {
    const Json& performance = member(model, "performance");
    ThisRun run;
    run.baseline = finite_numbers(member(member(performance, "initial_samples"), "baseline"));
    run.candidate = finite_numbers(member(member(performance, "initial_samples"), "candidate"));
    run.confirmation_baseline = finite_numbers(member(member(performance, "confirmation_samples"), "baseline"));
    run.confirmation_candidate = finite_numbers(member(member(performance, "confirmation_samples"), "candidate"));
    run.baseline_bundle_id = text_of(member(report_, "baseline_bundle_ids"), text_of(model, "revision"));
    static const std::vector<HistoryPoint> none;
    const auto history = histories_.find({text_of(model, "model"), text_of(model, "revision")});
    std::string out = throughput_plot(fmt::format("throughput-{}", i), text_of(model, "model"),
                                      text_of(model, "revision"), history != histories_.end() ? history->second : none,
                                      &run);
    if (performance.is_object()) {
      out += fmt::format("<p>Extra rounds of repeats: {} in the first comparison, {} in the rerun.</p>\n",
                         integer_of(performance, "initial_extra_rounds"),
                         integer_of(performance, "confirmation_extra_rounds"));
    }
    return out;
  }

  std::string training_details(const Json& model, std::size_t i) const {
    const Json& training = member(model, "training");
    if (!training.is_object()) return "";
    std::string out = "<h4>Training</h4>\n" + loss_plot(fmt::format("loss-{}", i), text_of(model, "model"), training);
    const Json& verdict = member(training, "verdict");
    const Json& loss = member(verdict, "loss_curve");
    if (!text_of(loss, "detail").empty()) out += fmt::format("<p>Loss curve: {}</p>\n", escape(text_of(loss, "detail")));
    const Json& eval = member(verdict, "eval");
    if (eval.is_object()) out += fmt::format("<p>Eval: {}</p>\n", escape(eval_text(eval)));
    return out;
  }

  std::string bisection_details(const Json& model, std::size_t i) const {
    const Json& bisection = member(model, "bisection");
    if (!bisection.is_object()) return "";
    std::string out = "<h4>Bisection</h4>\n" + bisection_plot(fmt::format("bisection-{}", i), text_of(model, "model"), bisection);
    out += fmt::format("<p>{}</p>\n", escape(text_of(bisection, "detail")));
    const Json& probes = items(bisection, "probes");
    if (probes.empty()) return out;
    out += "<table><caption>Probes in the order their answers arrived</caption><thead><tr><th scope=\"col\">round</th>"
           "<th scope=\"col\">change</th><th scope=\"col\">attempt</th><th scope=\"col\">verdict</th>"
           "<th scope=\"col\">evidence</th></tr></thead><tbody>\n";
    for (const Json& probe : probes) {
      std::string notes = text_of(probe, "detail");
      if (flag_of(probe, "obsolete")) notes += " (arrived after it was cancelled)";
      if (flag_of(probe, "contradicts")) notes += " (contradicts the others)";
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         integer_of(probe, "round") > 0 ? fmt::format("{}", integer_of(probe, "round")) : "-",
                         escape(text_of(probe, "change")), integer_of(probe, "attempt"), escape(text_of(probe, "verdict")),
                         escape(notes));
    }
    return out + "</tbody></table>\n";
  }

  std::string evidence_list(const Json& model) const {
    std::vector<std::string> facts;
    // Each node with the backend its result was made on, where the report recorded it.
    const Json& backends = member(model, "node_backends");
    std::vector<std::string> nodes;
    for (const std::string& node : texts(member(model, "nodes"))) {
      const std::string backend = backends.is_object() ? text_of(backends, node) : "";
      nodes.push_back(backend.empty() ? node : fmt::format("{} ({})", node, backend));
    }
    if (!nodes.empty()) facts.push_back("ran on " + escape(fmt::format("{}", fmt::join(nodes, ", "))));
    if (integer_of(model, "duration_ms") > 0) facts.push_back("took " + duration_text(integer_of(model, "duration_ms")));
    const Json& triage = member(model, "triage");
    if (triage.is_object()) {
      facts.push_back(fmt::format("triage: {}: {}", escape(text_of(triage, "decision")), escape(text_of(triage, "reason"))));
    }
    const Json& job = member(model, "measure_job");
    if (job.is_object()) {
      const auto id = integer_of(job, "job_id");
      facts.push_back(fmt::format("measure job {}: <code>kiln result {}</code>, <code>kiln rerun {}</code>", id, id, id));
    }
    if (facts.empty()) return "";
    std::string out = "<ul>\n";
    for (const auto& fact : facts) out += "<li>" + fact + "</li>\n";
    return out + "</ul>\n";
  }

  std::string details_section() const {
    const Json& models = items(report_, "models");
    if (models.empty()) return "";
    std::string out = "<section id=\"evidence\">\n<h2>Evidence per model</h2>\n";
    for (std::size_t i = 0; i < models.size(); ++i) {
      const Json& model = models[i];
      out += fmt::format("<article id=\"model-{}\">\n<h3>{} on revision {}: {}</h3>\n<p>{}</p>\n", i,
                         escape(text_of(model, "model")), escape(text_of(model, "revision")),
                         model_verdict_html(text_of(model, "verdict")), escape(text_of(model, "detail")));
      out += performance_details(model, i) + training_details(model, i) + bisection_details(model, i) +
             evidence_list(model) + "</article>\n";
    }
    return out + "</section>\n";
  }

  std::string reproducibility_section() const {
    const Json& jobs = items(member(report_, "reproducibility"), "jobs");
    if (jobs.empty()) return "";
    std::string out = "<section id=\"reproducibility\">\n<h2>Reproducibility: earlier results rerun</h2>\n<p>Reported, "
                      "never part of this run's verdict.</p>\n<table><thead><tr><th scope=\"col\">job</th>"
                      "<th scope=\"col\">model</th><th scope=\"col\">revision</th><th scope=\"col\">run</th>"
                      "<th scope=\"col\">rerun as</th><th scope=\"col\">verdict</th><th scope=\"col\">detail</th>"
                      "</tr></thead><tbody>\n";
    for (const Json& job : jobs) {
      const std::string run_id = text_of(job, "run_id");
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td><a href=\"{}\">{}</a></td><td>{}</td><td>{}</td>"
                         "<td>{}</td></tr>\n",
                         integer_of(job, "job_id"), escape(text_of(job, "model")), escape(text_of(job, "revision")),
                         escape(run_page_name(run_id)), escape(run_id), integer_of(job, "rerun_job_id"),
                         escape(text_of(job, "verdict")), escape(text_of(job, "detail")));
    }
    return out + "</tbody></table>\n</section>\n";
  }

  const Json& report_;
  Histories histories_;
  std::map<std::string, std::size_t> ticket_anchor_;
};

}  // namespace

std::string render_run_page(const Json& report, std::span<const RunDigest> history) {
  return RunPage(report, history).render();
}

}  // namespace kiln::report
