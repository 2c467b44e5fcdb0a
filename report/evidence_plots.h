// The run page's evidence plots of one model: its loss curve against the reference's band, and
// its bisection's probes round by round. Each takes the report's JSON for it and returns the SVG
// with a legend, or "" when there is nothing to draw.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace kiln::report {

// `training`: a model's `training` (its measure job's curves, bands and verdict).
std::string loss_plot(const std::string& id, std::string_view model, const nlohmann::json& training);
// `bisection`: a model's `bisection` (the probes, in arrival order, each with its round).
std::string bisection_plot(const std::string& id, std::string_view model, const nlohmann::json& bisection);

}  // namespace kiln::report
