// The agent host tests use the shared temporary directory helper.
#pragma once

#include "tests/support/temp_dir.h"

namespace kiln::agent::testing {

using kiln::testing::read_file;
using kiln::testing::TempDir;

}  // namespace kiln::agent::testing
