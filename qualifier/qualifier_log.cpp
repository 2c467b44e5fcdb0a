#include "qualifier/qualifier_log.h"

#include <chrono>
#include <iostream>
#include <mutex>

namespace kiln::qualifier {
namespace {

// Held while one whole line is written.
std::mutex g_output;

}  // namespace

TimeMs wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void say(const std::string& line) {
  std::lock_guard lock(g_output);
  std::cerr << "kiln-qualifier: " << line << "\n" << std::flush;
}

int RunLines::overflow(int c) {
  if (c == traits_type::eof()) return c;
  if (c != '\n') {
    line_ += static_cast<char>(c);
    return c;
  }
  std::lock_guard lock(g_output);
  std::cerr << prefix_ << line_ << "\n" << std::flush;
  line_.clear();
  return c;
}

Result<std::unique_ptr<cli::Client>> connect(const QualifierConfig& config) {
  cli::Reconnect reconnect;
  reconnect.enabled = true;
  reconnect.notice = [](const std::string& text) { say(text); };
  return cli::Client::connect(config.client, std::move(reconnect));
}

}  // namespace kiln::qualifier
