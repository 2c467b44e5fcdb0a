#include "coordinator/server/group_commit.h"

#include <utility>

namespace kiln::coordinator {

Status GroupCommit::before_write() {
  if (open_) return {};
  if (auto s = store_.begin(); !s) return s;
  open_ = true;
  return {};
}

void GroupCommit::send(std::function<void()> send) {
  if (open_) {
    waiting_.push_back(std::move(send));
  } else {
    send();
  }
}

Status GroupCommit::commit() {
  if (!open_) return {};
  open_ = false;
  std::vector<std::function<void()>> waiting = std::exchange(waiting_, {});
  if (auto s = store_.commit(); !s) return s;
  for (auto& send : waiting) send();
  return {};
}

}  // namespace kiln::coordinator
