// How kiln prints a duration to people, everywhere: "850ms", "4.2s", "3m07s", "2h05m".
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

std::string duration_text(std::uint64_t ms);

}  // namespace kiln
