#include "common/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <zmq.h>

namespace kiln {
namespace {

constexpr std::string_view kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

Status write_file_exclusive(const std::string& path, const std::string& content, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return fail(Errc::already_exists,
                  fmt::format("{} already exists; remove it first or choose another name", path));
    }
    return fail(Errc::io, fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  // The umask may have narrowed the mode; a public key must still be readable and a secret
  // key must never be wider than asked.
  ::fchmod(fd, mode);
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return fail(Errc::io, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    return fail(Errc::io, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }
  return {};
}

// Reads `name = "value"` lines; returns the value for `wanted`, or an empty string.
Result<std::string> read_key_field(const std::string& path, std::string_view wanted) {
  std::ifstream in(path);
  if (!in) return fail(Errc::io, fmt::format("cannot read key file {}: {}", path, std::strerror(errno)));
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      return fail(Errc::config, fmt::format("{}:{}: expected `name = \"value\"`", path, line_no));
    }
    std::string name = line.substr(start, eq - start);
    name.erase(name.find_last_not_of(" \t") + 1);
    std::string value = line.substr(eq + 1);
    auto q1 = value.find('"');
    auto q2 = value.rfind('"');
    if (q1 == std::string::npos || q2 == q1) {
      return fail(Errc::config, fmt::format("{}:{}: the value of {} must be in double quotes", path, line_no, name));
    }
    value = value.substr(q1 + 1, q2 - q1 - 1);
    if (name == wanted) {
      if (!is_z85_key(value)) {
        return fail(Errc::config, fmt::format("{}:{}: {} is not a 40-character Z85 CURVE key; "
                                              "make a new pair with `kiln keygen`", path, line_no, name));
      }
      return value;
    }
  }
  return std::string();
}

}  // namespace

bool is_z85_key(const std::string& text) {
  if (text.size() != 40) return false;
  for (char c : text) {
    if (kZ85Alphabet.find(c) == std::string_view::npos) return false;
  }
  return true;
}

Result<KeyPair> generate_keypair() {
  char public_key[41];
  char secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return fail(Errc::internal, fmt::format("cannot generate a CURVE keypair: {} (is libzmq built with CURVE?)",
                                            zmq_strerror(zmq_errno())));
  }
  return KeyPair{public_key, secret_key};
}

Status write_keypair(const std::string& prefix, const KeyPair& keys) {
  const std::string secret_path = prefix + ".key";
  const std::string public_path = prefix + ".pub";
  struct stat st {};
  if (::stat(public_path.c_str(), &st) == 0) {
    return fail(Errc::already_exists,
                fmt::format("{} already exists; remove it first or choose another name", public_path));
  }
  auto secret = write_file_exclusive(
      secret_path,
      fmt::format("# kiln CURVE secret key. Keep it private (mode 0600); never copy it off this host.\n"
                  "public-key = \"{}\"\nsecret-key = \"{}\"\n",
                  keys.public_key, keys.secret_key),
      0600);
  if (!secret) return secret;
  return write_file_exclusive(
      public_path, fmt::format("# kiln CURVE public key.\npublic-key = \"{}\"\n", keys.public_key), 0644);
}

Result<KeyPair> load_secret_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return fail(Errc::io, fmt::format("cannot read secret key file {}: {}", path, std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return fail(Errc::config,
                fmt::format("secret key file {} has mode {:o}, which lets other users read it; "
                            "run `chmod 600 {}` (and make a new key if it may have leaked)",
                            path, st.st_mode & 0777, path));
  }
  auto public_key = read_key_field(path, "public-key");
  if (!public_key) return tl::unexpected(public_key.error());
  auto secret_key = read_key_field(path, "secret-key");
  if (!secret_key) return tl::unexpected(secret_key.error());
  if (public_key->empty() || secret_key->empty()) {
    return fail(Errc::config, fmt::format("{} must contain public-key and secret-key; make one with `kiln keygen`", path));
  }
  return KeyPair{*public_key, *secret_key};
}

Result<std::string> load_public_key_file(const std::string& path) {
  auto public_key = read_key_field(path, "public-key");
  if (!public_key) return tl::unexpected(public_key.error());
  if (public_key->empty()) {
    return fail(Errc::config, fmt::format("{} has no public-key line; make one with `kiln keygen`", path));
  }
  return *public_key;
}

}  // namespace kiln
