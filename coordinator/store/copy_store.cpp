#include "coordinator/store/copy_store.h"

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

Result<StoreCounts> count(Store& store) {
  auto snapshot = store.load();
  if (!snapshot) return tl::unexpected(snapshot.error());
  auto lines = each_audit_line(store, [](const protocol::AuditEntry&) -> Status { return {}; });
  if (!lines) return tl::unexpected(lines.error());
  return StoreCounts{snapshot->nodes.size(), snapshot->jobs.size(), snapshot->records.size(), snapshot->leases.size(),
                     *lines};
}

}  // namespace

std::string to_string(const StoreCounts& counts) {
  return fmt::format("{} nodes, {} jobs, {} records, {} leases, {} audit lines", counts.nodes, counts.jobs,
                     counts.records, counts.leases, counts.audit_lines);
}

Result<StoreCounts> copy_store(Store& from, Store& to, const std::function<void(const std::string&)>& progress) {
  const auto tell = [&](const std::string& what) {
    if (progress) progress(what);
  };
  auto already = count(to);
  if (!already) return tl::unexpected(already.error());
  if (*already != StoreCounts{}) {
    return fail(Errc::conflict, fmt::format("the target store already holds kiln data ({}); migrate into an empty "
                                            "database",
                                            to_string(*already)));
  }
  auto snapshot = from.load();
  if (!snapshot) return tl::unexpected(snapshot.error());
  StoreCounts copied;
  tell(fmt::format("copying {} nodes", snapshot->nodes.size()));
  for (const auto& node : snapshot->nodes) {
    if (auto s = to.save_node(node); !s) return tl::unexpected(s.error());
    ++copied.nodes;
  }
  tell(fmt::format("copying {} jobs", snapshot->jobs.size()));
  for (const auto& job : snapshot->jobs) {
    if (auto s = to.save_job(job); !s) return tl::unexpected(s.error());
    ++copied.jobs;
  }
  tell(fmt::format("copying {} records", snapshot->records.size()));
  for (const auto& record : snapshot->records) {
    if (auto s = to.save_record(record); !s) return tl::unexpected(s.error());
    ++copied.records;
  }
  tell(fmt::format("copying {} leases", snapshot->leases.size()));
  for (const auto& lease : snapshot->leases) {
    if (auto s = to.save_lease(lease); !s) return tl::unexpected(s.error());
    ++copied.leases;
  }
  tell("copying the audit log");
  auto lines = each_audit_line(from, [&](const protocol::AuditEntry& line) { return to.append_audit(line); });
  if (!lines) return tl::unexpected(lines.error());
  copied.audit_lines = *lines;

  auto landed = count(to);
  if (!landed) return tl::unexpected(landed.error());
  if (*landed != copied) {
    return fail(Errc::integrity, fmt::format("the target store holds {} after copying {}; it is incomplete: drop its "
                                             "schema kiln and migrate again",
                                             to_string(*landed), to_string(copied)));
  }
  return copied;
}

}  // namespace kiln::coordinator
