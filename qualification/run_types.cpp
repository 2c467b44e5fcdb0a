#include "qualification/run_types.h"

namespace kiln::qualification {

bool fails_run(ModelVerdict verdict) {
  switch (verdict) {
    case ModelVerdict::pending:
    case ModelVerdict::passed:
    case ModelVerdict::improved:
    case ModelVerdict::flaky:
    case ModelVerdict::inconclusive:
    case ModelVerdict::skipped: return false;
    default: return true;
  }
}
}  // namespace kiln::qualification
