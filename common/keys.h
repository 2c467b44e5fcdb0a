// CURVE keypairs on disk. A secret key file holds both halves and must be private to its
// owner (mode 0600); a public key file may be shared. Keys are Z85 text, 40 characters.
#pragma once

#include <string>

#include "common/error.h"

namespace kiln {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

Result<KeyPair> generate_keypair();

// Writes PREFIX.key (secret, mode 0600) and PREFIX.pub. Refuses to overwrite either.
Status write_keypair(const std::string& prefix, const KeyPair& keys);

// Refuses a file that its group or others may read or write: a leaked secret key lets
// anyone act with that key's role.
Result<KeyPair> load_secret_key_file(const std::string& path);

// Reads a .pub file, or a .key file's public half.
Result<std::string> load_public_key_file(const std::string& path);

bool is_z85_key(const std::string& text);

}  // namespace kiln
