// The pending requests, in scheduling order and filed for the planning pass. Internal to the
// scheduler core (scheduler_impl.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/error.h"
#include "coordinator/scheduler/scheduler_records.h"

namespace kiln::scheduler {

// A pending request's place in scheduling order: class rank (0 for all under fifo), the moment it
// queued from, its id.
using OrderKey = std::tuple<int, TimeMs, RequestId>;
// Requests of one shape compete for the same chips: pinned node, whole nodes, chips.
using Shape = std::tuple<std::string, int, int>;
inline Shape shape_of(const Request& q) { return {q.node.value_or(""), q.nodes, q.chips}; }

// Where the pass reads a pending request from (the scheduler decides, Impl::place_of):
//  - plain: no window, no preemption, no maintenance. Plain requests of one shape that lack free
//    chips once the reservations are taken all do: the pass leaves the rest of that shape unread.
//  - target: waits for its target (Impl::waits_for_target) and is not due to preempt as of
//    targets_filed_at. Until it is due, such a request changes a pass only if chips are free for
//    its shape, a reservation is left or a notice to an experiment would lose nothing; otherwise
//    it only wakes the scheduler when it becomes due. So, like a plain shape, a shape of them is
//    read no further once its next request could take nothing. schedule() files them again as of
//    each pass's moment (refile_targets).
//  - due: waits for its target and due as of targets_filed_at. A due request changes a pass only
//    by starting, by holding a reservation or by preempting: a shape of them is read no further
//    once its next request lacks free chips, no reservation is left and no node is filed where a
//    notice could free chips for it (Impl::may_find_victims).
//  - claimant: holds a claim and no window. Every pass's view holds their claims from the start
//    (PassView), so such a request changes a pass only by starting, which needs free chips for its
//    shape that no other claim holds: a pass reads in full those with a free chip of their own
//    claim, and a shape of the others no further than its first request that lacks free chips no
//    claim holds (Impl::free_unclaimed).
//  - other: every other request, read in full.
enum class Filing { plain, target, due, claimant, other };

struct QueuePlace {
  Filing filing = Filing::other;
  Shape shape;
  TimeMs due_ms = 0;  // a `target` request's: when it becomes due
};

// Keys counted by rank: how many are less than a given one, in about the square root of their
// number (a few hundred steps for a queue of a hundred thousand), where a std::map counts them
// one by one. Sorted blocks of at most kMaxBlock keys, in order, none empty.
class RankedKeys {
 public:
  void insert(const OrderKey& key);
  void erase(const OrderKey& key);
  std::size_t rank(const OrderKey& key) const;
  std::size_t size() const { return size_; }
  // Whether the blocks hold exactly `keys`, in order, sized and filled as they must be.
  template <typename Keys>
  bool holds(const Keys& keys) const;

 private:
  static constexpr std::size_t kMaxBlock = 512;
  // The block `key` belongs in: the last whose first key is not greater, else the first.
  std::size_t block_of(const OrderKey& key) const;

  std::vector<std::vector<OrderKey>> blocks_;
  std::size_t size_ = 0;
};

template <typename Keys>
bool RankedKeys::holds(const Keys& keys) const {
  if (keys.size() != size_) return false;
  auto key = keys.begin();
  for (const auto& block : blocks_) {
    if (block.empty() || block.size() > kMaxBlock) return false;
    for (const OrderKey& held : block) {
      if (key == keys.end() || held != key->first) return false;
      ++key;
    }
  }
  return key == keys.end();
}

// The queue keeps every pending request once in scheduling order and once in the filing its
// place names; a shape's filing goes when its last request does.
class RequestQueue {
 public:
  using Entries = std::map<OrderKey, RequestRec*>;
  using ByShape = std::map<Shape, Entries>;

  bool empty() const { return order_.empty(); }
  std::size_t size() const { return order_.size(); }
  Entries::const_iterator begin() const { return order_.begin(); }
  Entries::const_iterator end() const { return order_.end(); }
  RequestRec* at(const OrderKey& key) const { return order_.at(key); }
  // The key of the request last in scheduling order; the queue must not be empty.
  const OrderKey& last_key() const { return order_.rbegin()->first; }
  // How many requests sort before `key`: how many are ahead of the request it is the key of.
  std::size_t ahead_of(const OrderKey& key) const;

  void add(const OrderKey& key, RequestRec& r, const QueuePlace& place);
  // Takes the request out; `place` must be the one it was added with (or refiled to).
  void remove(const OrderKey& key, const QueuePlace& place);
  // Files the requests waiting for their targets as of `now`: those due by then move from the
  // targets to the due ones (and, with a clock set back, those not yet due back). `due_at`: when a
  // request becomes due.
  void refile_targets(TimeMs now, const std::function<TimeMs(const RequestRec&)>& due_at);
  // The moment the targets are filed as of: a request is `target` if it becomes due after it.
  TimeMs targets_filed_at() const { return targets_filed_at_; }

  const Entries& others() const { return others_; }
  const ByShape& plain_by_shape() const { return plain_; }
  const ByShape& targets_by_shape() const { return targets_; }
  const ByShape& claims_by_shape() const { return claims_; }
  const ByShape& due_by_shape() const { return due_; }
  // When the first request filed as `target` becomes due.
  std::optional<TimeMs> next_target_due() const;

  // Whether the queue holds exactly the requests without a lease, each filed where `place_of`
  // says, against a scan of `requests`.
  Status check(const std::map<RequestId, RequestRec>& requests,
               const std::function<OrderKey(const Request&)>& key_of,
               const std::function<QueuePlace(const RequestRec&)>& place_of) const;

 private:
  ByShape* by_shape(Filing filing);
  const ByShape* by_shape(Filing filing) const;

  Entries order_;
  RankedKeys ranks_;
  ByShape plain_;
  ByShape targets_;
  ByShape due_;
  ByShape claims_;
  Entries others_;
  // The `target` requests by when each becomes due, then id; the key each is queued under.
  std::map<std::pair<TimeMs, RequestId>, OrderKey> targets_by_due_;
  TimeMs targets_filed_at_ = kFreeNow;
};

}  // namespace kiln::scheduler
