#include "cli/kiln_cli.h"

int main(int argc, char** argv) { return kiln::cli::run_kiln(argc, argv); }
