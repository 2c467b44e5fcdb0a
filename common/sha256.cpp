#include "common/sha256.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <openssl/evp.h>

namespace kiln {
namespace {

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

void Sha256::Free::operator()(evp_md_ctx_st* context) const { EVP_MD_CTX_free(context); }

Result<Sha256> Sha256::start() {
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  if (context == nullptr || EVP_DigestInit_ex(context, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(context);
    return fail(Errc::internal, "OpenSSL could not start a SHA-256 digest; check libssl");
  }
  return Sha256(context);
}

void Sha256::update(const char* data, std::size_t size) { EVP_DigestUpdate(context_.get(), data, size); }

Result<std::string> Sha256::finish_hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  if (EVP_DigestFinal_ex(context_.get(), digest, &digest_size) != 1) {
    return fail(Errc::internal, "OpenSSL could not finish a SHA-256 digest; check libssl");
  }
  std::string hex;
  for (unsigned int i = 0; i < digest_size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

Result<std::string> sha256_of_file(const std::string& path, std::uint64_t size_limit_bytes) {
  // O_NONBLOCK: a FIFO in place of the file must not block the open; regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    return fail(error == ENOENT ? Errc::not_found : Errc::io,
                fmt::format("cannot open {}: {}", path, std::strerror(error)));
  }
  const FdCloser closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    return fail(Errc::invalid_argument, fmt::format("{} is not a regular file", path));
  }
  auto digest = Sha256::start();
  if (!digest) return tl::unexpected(digest.error());
  std::vector<char> buffer(1 << 20);
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return fail(Errc::io, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    if (got == 0) break;
    total += static_cast<std::uint64_t>(got);
    if (total > size_limit_bytes) {
      return fail(Errc::too_large, fmt::format("{} is over the limit of {} bytes", path, size_limit_bytes));
    }
    digest->update(buffer.data(), static_cast<std::size_t>(got));
  }
  return digest->finish_hex();
}

}  // namespace kiln
