#include "coordinator/store/copy_store.h"

#include <limits>

#include <fmt/format.h>

namespace kiln::coordinator {
namespace {

constexpr std::uint32_t kAuditPage = 10000;

// Every audit line of a store, oldest first, handed to `visit` page by page.
Result<std::size_t> each_audit_line(Store& store, const std::function<Status(const protocol::AuditEntry&)>& visit) {
  protocol::ListAudit query{0, 0, kAuditPage};
  std::size_t count = 0;
  for (;;) {
    auto page = store.read_audit(query);
    if (!page) return tl::unexpected(page.error());
    if (page->empty()) return count;
    for (const auto& line : *page) {
      if (auto s = visit(line); !s) return tl::unexpected(s.error());
      ++count;
    }
    query.after_seq = page->back().seq;
  }
}

// Writes go to the target in transactions of this many, so a large store is copied at the speed
// of its rows, not of one commit per row.
constexpr std::size_t kWritesPerCommit = 1000;

// The target's writes, grouped: each `write` joins the open transaction, committed every
// kWritesPerCommit writes and at finish().
class GroupedWrites {
 public:
  explicit GroupedWrites(Store& to) : to_(to) {}
  Status write(const std::function<Status()>& one) {
    if (pending_ == 0) {
      if (auto s = to_.begin(); !s) return s;
    }
    if (auto s = one(); !s) return s;
    return ++pending_ == kWritesPerCommit ? finish() : Status{};
  }
  Status finish() {
    if (pending_ == 0) return {};
    pending_ = 0;
    return to_.commit();
  }

 private:
  Store& to_;
  std::size_t pending_ = 0;
};

}  // namespace

std::string to_string(const StoreCounts& counts) {
  return fmt::format("{} nodes, {} jobs, {} records, {} leases, {} audit lines", counts.nodes, counts.jobs,
                     counts.records, counts.leases, counts.audit_lines);
}

Result<StoreCounts> copy_store(Store& from, Store& to, const std::function<void(const std::string&)>& progress) {
  const auto tell = [&](const std::string& what) {
    if (progress) progress(what);
  };
  auto already = to.count();
  if (!already) return tl::unexpected(already.error());
  if (*already != StoreCounts{}) {
    return fail(Errc::conflict, fmt::format("the target store already holds kiln data ({}); migrate into an empty "
                                            "database",
                                            to_string(*already)));
  }
  auto source = from.count();
  if (!source) return tl::unexpected(source.error());
  // Nodes, records and leases are read whole (the live jobs that come with them are not used);
  // the jobs and the audit log, which grow with the fleet's history, a page at a time.
  auto snapshot = from.load_live(1, std::numeric_limits<TimeMs>::max());
  if (!snapshot) return tl::unexpected(snapshot.error());
  StoreCounts copied;
  GroupedWrites writes(to);
  const auto copy_all = [&](const auto& list, std::size_t& counted, const auto& save) -> Status {
    for (const auto& item : list) {
      if (auto s = writes.write([&] { return save(item); }); !s) return s;
      ++counted;
    }
    return {};
  };
  tell(fmt::format("copying {} nodes", snapshot->nodes.size()));
  if (auto s = copy_all(snapshot->nodes, copied.nodes, [&](const NodeRecord& n) { return to.save_node(n); }); !s) {
    return tl::unexpected(s.error());
  }
  tell(fmt::format("copying {} jobs", source->jobs));
  constexpr std::size_t kJobsPerProgress = 100000;
  auto jobs = from.each_job([&](const JobRecord& job) -> Status {
    if (auto s = writes.write([&] { return to.save_job(job); }); !s) return s;
    if (++copied.jobs % kJobsPerProgress == 0) tell(fmt::format("copied {} of {} jobs", copied.jobs, source->jobs));
    return {};
  });
  if (!jobs) return tl::unexpected(jobs.error());
  tell(fmt::format("copying {} records", snapshot->records.size()));
  if (auto s = copy_all(snapshot->records, copied.records,
                        [&](const protocol::RecordEntry& r) { return to.save_record(r); });
      !s) {
    return tl::unexpected(s.error());
  }
  tell(fmt::format("copying {} leases", snapshot->leases.size()));
  if (auto s = copy_all(snapshot->leases, copied.leases, [&](const LeaseRecord& l) { return to.save_lease(l); }); !s) {
    return tl::unexpected(s.error());
  }
  tell(fmt::format("copying {} audit lines", source->audit_lines));
  auto lines = each_audit_line(from, [&](const protocol::AuditEntry& line) {
    return writes.write([&] { return to.append_audit(line); });
  });
  if (!lines) return tl::unexpected(lines.error());
  copied.audit_lines = *lines;
  if (auto s = writes.finish(); !s) return tl::unexpected(s.error());

  if (copied != *source) {
    return fail(Errc::integrity, fmt::format("the source store held {} when the copy began but {} were copied: it "
                                             "changed meanwhile; stop the coordinator, drop the target's schema kiln "
                                             "and migrate again",
                                             to_string(*source), to_string(copied)));
  }
  auto landed = to.count();
  if (!landed) return tl::unexpected(landed.error());
  if (*landed != copied) {
    return fail(Errc::integrity, fmt::format("the target store holds {} after copying {}; it is incomplete: drop its "
                                             "schema kiln and migrate again",
                                             to_string(*landed), to_string(copied)));
  }
  return copied;
}

}  // namespace kiln::coordinator
