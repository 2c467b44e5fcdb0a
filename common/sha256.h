// SHA-256 of a file, read in chunks (OpenSSL): what content-addressed artifacts are named and
// verified by.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace kiln {

// A SHA-256 digest fed piece by piece, for callers that do more with each piece than hash it
// (a package copied into staging as it is verified).
class Sha256 {
 public:
  static Result<Sha256> start();
  void update(const char* data, std::size_t size);
  // Lowercase hex of everything fed so far.
  Result<std::string> finish_hex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* context) const;
  };
  explicit Sha256(evp_md_ctx_st* context) : context_(context) {}
  std::unique_ptr<evp_md_ctx_st, Free> context_;
};

// Lowercase hex digest of the regular file at `path`; refuses one above size_limit_bytes
// (Errc::too_large), a missing one (Errc::not_found) or anything but a regular file.
Result<std::string> sha256_of_file(const std::string& path, std::uint64_t size_limit_bytes);

}  // namespace kiln
