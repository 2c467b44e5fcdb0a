// The change-history importer (`kiln change import`): TOML history, then the stored JSON form
// each change is sent as.
#include <nlohmann/json.hpp>

#include "records/change.h"
#include "fuzz/fuzz_support.h"

KILN_FUZZ_ENTRY(change_history) {
  using namespace kiln::qualification;
  constexpr kiln::TimeMs kFirstMergedAtMs = 1796013552000;
  auto history = parse_change_history(kiln::fuzz::as_text(data, size), "changes.toml", kFirstMergedAtMs);
  if (!history) return 0;
  for (const Change& change : *history) {
    if (!validate(change)) kiln::fuzz::violated("the importer accepted a change that does not validate");
    auto stored = change_from_json(to_json(change));
    if (!stored || stored->id != change.id) kiln::fuzz::violated("an imported change does not read back from its record");
  }
  return 0;
}
