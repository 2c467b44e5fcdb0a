#include "common/http/loop_question.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "common/error.h"

namespace kiln::http {

LoopQuestion::LoopQuestion() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  KILN_ASSERT(wake_fd_ >= 0, "an eventfd can be made (the process is out of file descriptors otherwise)");
}

LoopQuestion::~LoopQuestion() { ::close(wake_fd_); }

std::optional<std::string> LoopQuestion::ask(std::chrono::milliseconds timeout) {
  std::lock_guard turn(asking_);
  std::unique_lock lock(mutex_);
  const std::uint64_t number = ++asked_;
  const std::uint64_t one = 1;
  // Only a full counter fails, and then the loop is woken already.
  (void)!::write(wake_fd_, &one, sizeof one);
  if (!answered_.wait_for(lock, timeout, [&] { return replied_ >= number; })) return std::nullopt;
  return std::move(answer_);
}

void LoopQuestion::answer_pending(const std::function<std::string()>& answer) {
  std::uint64_t count = 0;
  (void)!::read(wake_fd_, &count, sizeof count);
  std::unique_lock lock(mutex_);
  if (replied_ == asked_) return;
  const std::uint64_t number = asked_;
  // Made without the lock: the asker may give up meanwhile, and the answer is then dropped.
  lock.unlock();
  std::string text = answer();
  lock.lock();
  answer_ = std::move(text);
  replied_ = number;
  answered_.notify_all();
}

Handler loop_page(LoopQuestion& question, std::string content_type, std::function<std::string()> appended,
                  std::string loop, std::chrono::milliseconds timeout) {
  return [&question, content_type = std::move(content_type), appended = std::move(appended), loop = std::move(loop),
          timeout](const Request&) {
    auto page = question.ask(timeout);
    if (!page) {
      return text_response(503, fmt::format("{} did not make the page within {} ms; its log says what it is doing",
                                            loop, timeout.count()));
    }
    Response response;
    response.content_type = content_type;
    response.body = std::move(*page);
    if (appended) response.body += appended();
    return response;
  };
}

Result<std::unique_ptr<Server>> serve_loop_page(const std::string& listen, const std::string& path,
                                                LoopQuestion& question, std::string content_type,
                                                std::function<std::string()> appended, std::string loop,
                                                std::chrono::milliseconds timeout, const std::string& config_file) {
  Router router;
  router.exact(path, loop_page(question, std::move(content_type), std::move(appended), std::move(loop), timeout));
  return Server::start(listen, std::move(router), {},
                       fmt::format("change [http] listen in {}, or stop what listens there", config_file));
}

}  // namespace kiln::http
