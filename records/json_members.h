// Reading a record's members leniently: a reader that decides for itself what it requires.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace kiln::qualification {

// A string member of a report's object (the report, a model entry, a waiver), or "" when it has
// none of that name or it is not a string.
std::string report_text(const nlohmann::json& object, const char* name);

}  // namespace kiln::qualification
