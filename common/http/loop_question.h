// How an HTTP handler asks an event loop for an answer made from state the loop alone owns
// (the coordinator's core, the agent's): the handler, on the HTTP server's thread, asks and
// waits; the loop polls wake_fd() beside its sockets and answers on its own thread. So no other
// thread ever reads the loop's state, and the answer is true at the moment it is given.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/http/request.h"
#include "common/http/server.h"

namespace kiln::http {

class LoopQuestion {
 public:
  LoopQuestion();
  ~LoopQuestion();
  LoopQuestion(const LoopQuestion&) = delete;
  LoopQuestion& operator=(const LoopQuestion&) = delete;

  // Readable while a question waits: poll it in the loop.
  int wake_fd() const { return wake_fd_; }

  // The loop's answer, or nullopt when it gave none within `timeout` (the loop is busy: a slow
  // store write, a stuck driver call). One question at a time; a second caller waits its turn.
  std::optional<std::string> ask(std::chrono::milliseconds timeout);
  // In the loop: answers the waiting question with `answer()`, if there is one.
  void answer_pending(const std::function<std::string()>& answer);

 private:
  int wake_fd_ = -1;
  std::mutex asking_;  // one question at a time
  std::mutex mutex_;
  std::condition_variable answered_;
  std::uint64_t asked_ = 0;     // number of the latest question
  std::uint64_t replied_ = 0;   // number of the latest question answered
  std::string answer_;
};

// A page the loop makes: each request asks `question` and answers with `content_type`, the
// loop's text followed by what `appended` gives on the HTTP thread (figures that need nothing of
// the loop; may be empty), or 503 saying `loop` (as in "the coordinator's loop") did not answer
// within `timeout`.
Handler loop_page(LoopQuestion& question, std::string content_type, std::function<std::string()> appended,
                  std::string loop, std::chrono::milliseconds timeout);

// A server of one such page at `path` on `listen`; a bind that fails says to change [http] listen
// in `config_file`.
Result<std::unique_ptr<Server>> serve_loop_page(const std::string& listen, const std::string& path,
                                                LoopQuestion& question, std::string content_type,
                                                std::function<std::string()> appended, std::string loop,
                                                std::chrono::milliseconds timeout, const std::string& config_file);

}  // namespace kiln::http
