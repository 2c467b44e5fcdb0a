#include "agent/core/chip_owners.h"

#include <fmt/format.h>

namespace kiln::agent {

Status ChipOwners::claim(const std::string& owner, const std::string& description,
                         const std::vector<std::uint32_t>& chips) {
  KILN_ASSERT(!holds_any(owner), "an owner releases its chips before claiming again");
  std::map<std::string, std::vector<std::uint32_t>> busy;  // holder -> its chips asked for
  for (std::uint32_t chip : chips) {
    if (auto it = owner_by_chip_.find(chip); it != owner_by_chip_.end()) busy[it->second].push_back(chip);
  }
  if (!busy.empty()) {
    std::vector<std::string> held;
    for (const auto& [holder, taken] : busy) {
      held.push_back(fmt::format("{} {} {} held by {}", taken.size() == 1 ? "chip" : "chips", fmt::join(taken, ","),
                                 taken.size() == 1 ? "is" : "are", descriptions_.at(holder)));
    }
    return fail(Errc::unavailable, fmt::format("{}", fmt::join(held, "; ")));
  }
  for (std::uint32_t chip : chips) owner_by_chip_[chip] = owner;
  descriptions_[owner] = description;
  return {};
}

void ChipOwners::release(const std::string& owner) {
  for (auto it = owner_by_chip_.begin(); it != owner_by_chip_.end();) {
    it = it->second == owner ? owner_by_chip_.erase(it) : std::next(it);
  }
  descriptions_.erase(owner);
}

}  // namespace kiln::agent
