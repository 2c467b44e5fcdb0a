// A process's own figures on its /metrics page, as the kernel counts them.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/metrics/process_metrics.h"

using kiln::metrics::process_metrics_text;

namespace {

std::optional<double> value_of(const std::string& page, const std::string& name) {
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

double cpu_seconds_used() {
  rusage used{};
  ::getrusage(RUSAGE_SELF, &used);
  return static_cast<double>(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
         static_cast<double>(used.ru_utime.tv_usec + used.ru_stime.tv_usec) / 1e6;
}

}  // namespace

TEST_CASE("a process's page gives its CPU, files and memory under the names Prometheus's clients use") {
  const std::string before = process_metrics_text();
  for (const char* type : {"# TYPE process_cpu_seconds_total counter", "# TYPE process_open_fds gauge",
                           "# TYPE process_max_fds gauge", "# TYPE process_virtual_memory_bytes gauge",
                           "# TYPE process_resident_memory_bytes gauge", "# TYPE process_start_time_seconds gauge"}) {
    CAPTURE(type);
    CHECK(before.find(type) != std::string::npos);
  }

  rlimit files{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &files) == 0);
  CHECK(value_of(before, "process_max_fds") == static_cast<double>(files.rlim_cur));

  // Ten more open files are ten more on the page.
  std::vector<int> opened;
  for (int i = 0; i < 10; ++i) opened.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  const std::string with_ten = process_metrics_text();
  for (int fd : opened) ::close(fd);
  REQUIRE(value_of(before, "process_open_fds").has_value());
  CHECK(*value_of(with_ten, "process_open_fds") == *value_of(before, "process_open_fds") + 10);

  const double resident = value_of(before, "process_resident_memory_bytes").value_or(0);
  CHECK(resident > 1e6);
  CHECK(resident <= value_of(before, "process_virtual_memory_bytes").value_or(0));

  const double now = static_cast<double>(std::time(nullptr));
  const double started = value_of(before, "process_start_time_seconds").value_or(0);
  CHECK(started <= now + 1);
  CHECK(started > now - 24 * 3600);

  // CPU the process spends shows in its counter (the kernel counts in clock ticks).
  const double spent_from = cpu_seconds_used();
  volatile unsigned long spin = 0;
  while (cpu_seconds_used() - spent_from < 0.2) spin = spin + 1;
  const std::string after = process_metrics_text();
  CHECK(*value_of(after, "process_cpu_seconds_total") - *value_of(before, "process_cpu_seconds_total") >= 0.1);
}
