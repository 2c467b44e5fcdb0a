// Who holds which chips of this node: the coordinator's jobs (its kiln.diag and kiln.install
// jobs among them) and the work the agent runs for itself (diagnostics asked on the local
// socket). One owner per chip, whoever asked; the periodic probes only read telemetry and
// hold nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"

namespace kiln::agent {

class ChipOwners {
 public:
  // Gives every chip of `chips` to `owner`, or none of them: a conflict error naming who
  // holds the busy ones. An owner may not claim twice without releasing.
  Status claim(const std::string& owner, const std::string& description, const std::vector<std::uint32_t>& chips);
  // Frees every chip `owner` holds; an unknown owner holds nothing.
  void release(const std::string& owner);
  bool holds_any(const std::string& owner) const { return descriptions_.count(owner) > 0; }

 private:
  std::map<std::uint32_t, std::string> owner_by_chip_;
  std::map<std::string, std::string> descriptions_;  // owner -> what it is, for messages
};

}  // namespace kiln::agent
