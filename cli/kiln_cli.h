// The kiln command: every subcommand, its output and its exit code. docs/operations.md
// lists them.
#pragma once

namespace kiln::cli {

int run_kiln(int argc, char** argv);

}  // namespace kiln::cli
