// Where a file kiln installs is, seen from the running program: in a build tree beside bin/ (the
// build's layout), else where the install layout puts it relative to the program's folder. One
// answer for the driver backends the unit tier loads and the data files the sim package ships.
#pragma once

#include <string>
#include <string_view>

namespace kiln::process {

// `in_build_tree`: the file's path below the build directory (bin/'s parent), e.g.
// "lib/libkiln_sim_driver.so"; `from_bin`: its path relative to the installed program's folder,
// e.g. "../lib/x86_64-linux-gnu/kiln/libkiln_sim_driver.so". The installed path when neither
// exists, so that an error names where it was looked for.
std::string installed_file(std::string_view in_build_tree, std::string_view from_bin);

}  // namespace kiln::process
