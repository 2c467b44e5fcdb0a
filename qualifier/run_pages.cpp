#include "qualifier/run_pages.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "report/report_files.h"

namespace kiln::qualifier {

void RunPages::read_other_runs(cli::Client& client) {
  if (directory_.empty()) return;
  if (auto ok = recent_.refresh(client); !ok) {
    out_ << "could not read the runs for the report pages' history; the pages show what was read before: "
         << ok.error().message << "\n";
  }
  others_ = recent_.digests();
}

void RunPages::write(const nlohmann::json& document) {
  if (directory_.empty()) return;
  if (auto ok = report::write_run_files(directory_, document, others_); !ok) {
    out_ << "could not write the run's report pages: " << ok.error().message << "\n";
  }
}

http::Response report_file(const std::string& directory, const http::Request& request) {
  const std::string name = request.path == "/" ? "index.html" : request.path.substr(1);
  const bool plain = !name.empty() && name.front() != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
                     });
  const std::filesystem::path file = std::filesystem::path(directory) / name;
  const bool html = name.ends_with(".html");
  if (!plain || !(html || name.ends_with(".json"))) {
    return http::text_response(404, "no such page: the run pages are /, /RUN.html and /RUN.json");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return http::text_response(404, name == "index.html" ? "no run has been recorded yet: the index comes with the first"
                                                         : "no such run page: " + name + "; the index at / lists them");
  }
  http::Response response;
  response.content_type = html ? "text/html; charset=utf-8" : "application/json";
  response.body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return response;
}

}  // namespace kiln::qualifier
