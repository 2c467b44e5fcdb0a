// The qualifier's /metrics: CI's health from the coordinator's records (ci_metrics.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/http/server.h"
#include "client/client.h"
#include "qualification/ci_metrics.h"
#include "qualifier/qualifier_config.h"

namespace kiln::qualifier {

// Read on the HTTP server's thread over a connection of its own (each run's connection is its
// thread's), and on each scrape only what may have changed since the last: new requests and
// reports, the reports of runs not finished, the tickets.
class CiMetricsPage {
 public:
  explicit CiMetricsPage(const QualifierConfig& config) : config_(config) {}

  // The page; 503 until the records could be read once, then what was read last when they cannot.
  http::Response answer();

 private:
  Status refresh();

  const QualifierConfig& config_;
  std::unique_ptr<cli::Client> client_;
  std::uint64_t requests_seq_ = 0;
  std::uint64_t reports_seq_ = 0;
  qualification::CiMetrics metrics_;
  bool read_once_ = false;
  std::string problem_;  // the last one said
};

}  // namespace kiln::qualifier
