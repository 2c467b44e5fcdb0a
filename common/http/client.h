// A plain HTTP/1.1 GET on loopback, as a scraper sends it: what the tests of kiln's pages and
// kiln-bench-scale (reading the coordinator's /metrics around its timed requests) ask with.
#pragma once

#include <string>

namespace kiln::http {

struct Answer {
  int status = 0;  // 0: no answer (nothing listens, or it did not answer within 10 s)
  std::string head;
  std::string body;
};

// GET `path` from 127.0.0.1 at the port of `address` ("127.0.0.1:9470").
Answer get(const std::string& address, const std::string& path);

}  // namespace kiln::http
