#include "records/json_members.h"

#include <nlohmann/json.hpp>

namespace kiln::qualification {

std::string report_text(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return "";
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace kiln::qualification
