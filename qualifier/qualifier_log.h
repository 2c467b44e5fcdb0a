// The qualifier's output and clock: every line goes to stderr whole (the runs driven at once on
// their own threads do not mix their lines), a run's lines prefixed with its run id.
#pragma once

#include <memory>
#include <streambuf>
#include <string>

#include "common/error.h"
#include "common/time.h"
#include "client/client.h"
#include "qualifier/qualifier_config.h"

namespace kiln::qualifier {

// The wall clock, as the coordinator's records are stamped.
TimeMs wall_now_ms();

// One line of the qualifier's own ("kiln-qualifier: LINE").
void say(const std::string& line);

// A run's progress lines, each prefixed with its run id ("kiln-qualifier: run ID: LINE").
class RunLines final : public std::streambuf {
 public:
  explicit RunLines(const std::string& run_id) : prefix_("kiln-qualifier: run " + run_id + ": ") {}

 protected:
  int overflow(int c) override;

 private:
  std::string prefix_;
  std::string line_;
};

// A connection to the coordinator that reconnects by itself, saying so.
Result<std::unique_ptr<cli::Client>> connect(const QualifierConfig& config);

}  // namespace kiln::qualifier
