// What every kiln binary answers to --version: kiln's version and the protocol it speaks.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// The project version from CMake (project(kiln VERSION ...)).
std::string_view kiln_version();
// "kiln-agent 0.1.0 (protocol v1)".
std::string version_text(std::string_view binary);

}  // namespace kiln
