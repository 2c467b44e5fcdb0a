#include "coordinator/scheduler/scheduler_queue.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

namespace kiln::scheduler {

namespace {

void erase_from_shape(RequestQueue::ByShape& by_shape, const Shape& shape, const OrderKey& key) {
  auto filed = by_shape.find(shape);
  KILN_ASSERT(filed != by_shape.end(), "a queued request is filed by its shape");
  const std::size_t erased = filed->second.erase(key);
  KILN_ASSERT(erased == 1, "a queued request is filed by its shape");
  if (filed->second.empty()) by_shape.erase(filed);
}

}  // namespace

std::size_t RankedKeys::block_of(const OrderKey& key) const {
  auto after = std::upper_bound(blocks_.begin(), blocks_.end(), key,
                                [](const OrderKey& k, const std::vector<OrderKey>& block) { return k < block.front(); });
  return after == blocks_.begin() ? 0 : static_cast<std::size_t>(after - blocks_.begin()) - 1;
}

void RankedKeys::insert(const OrderKey& key) {
  ++size_;
  if (blocks_.empty()) {
    blocks_.push_back({key});
    return;
  }
  const std::size_t b = block_of(key);
  std::vector<OrderKey>& block = blocks_[b];
  block.insert(std::lower_bound(block.begin(), block.end(), key), key);
  if (block.size() <= kMaxBlock) return;
  // Split in halves: a block keeps between half and all of kMaxBlock after its first split.
  std::vector<OrderKey> upper(block.begin() + static_cast<std::ptrdiff_t>(block.size() / 2), block.end());
  block.resize(block.size() / 2);
  blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(b) + 1, std::move(upper));
}

void RankedKeys::erase(const OrderKey& key) {
  KILN_ASSERT(!blocks_.empty(), "erasing a key that is not ranked");
  const std::size_t b = block_of(key);
  std::vector<OrderKey>& block = blocks_[b];
  auto it = std::lower_bound(block.begin(), block.end(), key);
  KILN_ASSERT(it != block.end() && *it == key, "erasing a key that is not ranked");
  block.erase(it);
  --size_;
  if (block.empty()) blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(b));
}

std::size_t RankedKeys::rank(const OrderKey& key) const {
  if (blocks_.empty()) return 0;
  const std::size_t b = block_of(key);
  std::size_t before = 0;
  for (std::size_t i = 0; i < b; ++i) before += blocks_[i].size();
  const std::vector<OrderKey>& block = blocks_[b];
  return before + static_cast<std::size_t>(std::lower_bound(block.begin(), block.end(), key) - block.begin());
}

std::size_t RequestQueue::ahead_of(const OrderKey& key) const { return ranks_.rank(key); }

RequestQueue::ByShape* RequestQueue::by_shape(Filing filing) {
  return const_cast<ByShape*>(std::as_const(*this).by_shape(filing));
}

const RequestQueue::ByShape* RequestQueue::by_shape(Filing filing) const {
  switch (filing) {
    case Filing::plain:
      return &plain_;
    case Filing::target:
      return &targets_;
    case Filing::due:
      return &due_;
    case Filing::claimant:
      return &claims_;
    case Filing::other:
      break;
  }
  return nullptr;
}

void RequestQueue::add(const OrderKey& key, RequestRec& r, const QueuePlace& place) {
  const bool added = order_.emplace(key, &r).second;
  KILN_ASSERT(added, "a request is queued once");
  ranks_.insert(key);
  if (ByShape* filing = by_shape(place.filing)) {
    (*filing)[place.shape].emplace(key, &r);
  } else {
    others_.emplace(key, &r);
  }
  if (place.filing == Filing::target) targets_by_due_.emplace(std::pair{place.due_ms, r.req.id}, key);
}

void RequestQueue::remove(const OrderKey& key, const QueuePlace& place) {
  auto queued = order_.find(key);
  KILN_ASSERT(queued != order_.end(), "removing a request that is not queued");
  const RequestId id = queued->second->req.id;
  order_.erase(queued);
  ranks_.erase(key);
  if (ByShape* filing = by_shape(place.filing)) {
    erase_from_shape(*filing, place.shape, key);
  } else {
    others_.erase(key);
  }
  if (place.filing == Filing::target) targets_by_due_.erase({place.due_ms, id});
}

void RequestQueue::refile_targets(TimeMs now, const std::function<TimeMs(const RequestRec&)>& due_at) {
  if (now >= targets_filed_at_) {
    while (!targets_by_due_.empty() && targets_by_due_.begin()->first.first <= now) {
      const OrderKey key = targets_by_due_.begin()->second;
      RequestRec& r = *order_.at(key);
      erase_from_shape(targets_, shape_of(r.req), key);
      targets_by_due_.erase(targets_by_due_.begin());
      due_[shape_of(r.req)].emplace(key, &r);
    }
  } else {
    // A pass at a moment before the filing's (the caller's clock set back): requests due as of
    // the filing may not be due now.
    for (auto shape = due_.begin(); shape != due_.end();) {
      for (auto it = shape->second.begin(); it != shape->second.end();) {
        RequestRec& r = *it->second;
        if (const TimeMs due = due_at(r); due > now) {
          targets_[shape->first].emplace(it->first, &r);
          targets_by_due_.emplace(std::pair{due, r.req.id}, it->first);
          it = shape->second.erase(it);
        } else {
          ++it;
        }
      }
      shape = shape->second.empty() ? due_.erase(shape) : std::next(shape);
    }
  }
  targets_filed_at_ = now;
}

std::optional<TimeMs> RequestQueue::next_target_due() const {
  if (targets_by_due_.empty()) return std::nullopt;
  return targets_by_due_.begin()->first.first;
}

Status RequestQueue::check(const std::map<RequestId, RequestRec>& requests,
                           const std::function<OrderKey(const Request&)>& key_of,
                           const std::function<QueuePlace(const RequestRec&)>& place_of) const {
  std::size_t pending = 0;
  for (const auto& [id, r] : requests) {
    if (r.lease) continue;
    ++pending;
    auto queued = order_.find(key_of(r.req));
    if (queued == order_.end() || queued->second != &r) {
      return fail(Errc::internal, fmt::format("pending request {} is not queued", id));
    }
  }
  if (pending != order_.size()) return fail(Errc::internal, "the queue holds requests that are not pending");
  if (!ranks_.holds(order_)) return fail(Errc::internal, "the queue's ranks disagree with the queue");
  // Each pending request is filed once, where its place says.
  const auto filed_in = [](const Entries& entries, const OrderKey& key, const RequestRec* r) {
    auto entry = entries.find(key);
    return entry != entries.end() && entry->second == r;
  };
  std::size_t filed = others_.size();
  std::size_t targets = 0;
  for (const ByShape* filing : {&plain_, &targets_, &due_, &claims_}) {
    for (const auto& [shape, entries] : *filing) {
      if (entries.empty()) return fail(Errc::internal, "the queue keeps a filing of a shape with no request");
      filed += entries.size();
      if (filing == &targets_) targets += entries.size();
    }
  }
  for (const auto& [key, r] : order_) {
    const QueuePlace place = place_of(*r);
    bool found = false;
    if (const ByShape* filing = by_shape(place.filing)) {
      auto entries = filing->find(place.shape);
      found = entries != filing->end() && filed_in(entries->second, key, r);
    } else {
      found = filed_in(others_, key, r);
    }
    if (found && place.filing == Filing::target) {
      auto due = targets_by_due_.find({place.due_ms, r->req.id});
      found = due != targets_by_due_.end() && due->second == key;
    }
    if (!found) {
      return fail(Errc::internal, fmt::format("pending request {} is not filed where its kind and target say",
                                              r->req.id));
    }
  }
  if (filed != order_.size() || targets_by_due_.size() != targets) {
    return fail(Errc::internal, "the requests filed for the pass disagree with the queue");
  }
  return {};
}

}  // namespace kiln::scheduler
