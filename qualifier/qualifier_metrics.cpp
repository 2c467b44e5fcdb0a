#include "qualifier/qualifier_metrics.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "common/metrics/exposition.h"
#include "common/metrics/process_metrics.h"
#include "client/records_client.h"
#include "qualifier/qualifier_log.h"

namespace kiln::qualifier {

namespace qs = kiln::qualification::shell;

http::Response CiMetricsPage::answer() {
  if (auto ok = refresh(); !ok) {
    client_.reset();  // connect afresh on the next scrape
    if (!read_once_) {
      return http::text_response(503, "cannot read the coordinator's records yet: " + ok.error().message);
    }
    if (ok.error().message != problem_) say("/metrics shows what was read before: " + ok.error().message);
    problem_ = ok.error().message;
  } else {
    read_once_ = true;
    problem_.clear();
  }
  http::Response response;
  response.content_type = std::string(metrics::kContentType);
  response.body = metrics_.render(wall_now_ms()) + metrics::process_metrics_text();
  return response;
}

Status CiMetricsPage::refresh() {
  if (!client_) {
    auto client = cli::Client::connect(config_.client);
    if (!client) return tl::unexpected(client.error());
    client_ = std::move(*client);
  }
  auto requests = qs::list_run_requests(*client_, requests_seq_);
  if (!requests) return tl::unexpected(requests.error());
  for (const auto& recorded : *requests) {
    requests_seq_ = std::max(requests_seq_, recorded.seq);
    metrics_.add_request(recorded.request, recorded.requested_at_ms);
  }
  auto reports = qs::list_runs_after(*client_, reports_seq_);
  if (!reports) return tl::unexpected(reports.error());
  for (const auto& report : *reports) metrics_.add_report(report);
  for (const std::string& run_id : metrics_.unfinished_runs()) {
    auto report = qs::get_run(*client_, run_id);
    if (report) {
      metrics_.add_report(*report);
    } else if (report.error().code != Errc::not_found) {  // not_found: not started yet
      return tl::unexpected(report.error());
    }
  }
  auto tickets = qs::list_tickets(*client_);
  if (!tickets) return tl::unexpected(tickets.error());
  metrics_.set_tickets(*tickets);
  return {};
}

}  // namespace kiln::qualifier
