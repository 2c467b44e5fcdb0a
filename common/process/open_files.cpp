#include "common/process/open_files.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace kiln {

Result<OpenFilesLimit> raise_open_files_limit() {
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0) {
    return fail(Errc::io, fmt::format("cannot read the limit on open files: {}", std::strerror(errno)));
  }
  // "Unlimited" is not a number of files the kernel grants: a soft limit stops at fs.nr_open.
  rlim_t most = files.rlim_max;
  if (most == RLIM_INFINITY) {
    std::ifstream nr_open("/proc/sys/fs/nr_open");
    if (!(nr_open >> most) || most == 0) most = files.rlim_cur;
  }
  OpenFilesLimit limit{files.rlim_cur, files.rlim_cur, most};
  if (files.rlim_cur >= most) return limit;
  files.rlim_cur = most;
  if (::setrlimit(RLIMIT_NOFILE, &files) != 0) {
    return fail(Errc::io, fmt::format("cannot raise the limit on open files from {} to its hard limit {}: {}",
                                      limit.before, limit.hard, std::strerror(errno)));
  }
  limit.now = files.rlim_cur;
  return limit;
}

}  // namespace kiln
