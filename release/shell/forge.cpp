#include "release/shell/forge.h"

#include <curl/curl.h>

#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::release {

namespace {

std::size_t collect(char* data, std::size_t size, std::size_t count, void* sink) {
  static_cast<std::string*>(sink)->append(data, size * count);
  return size * count;
}

Result<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (!in || token.empty()) {
    return fail(Errc::config, fmt::format("cannot read the forge token from {}: missing or empty; write the API token "
                                          "there (readable by you only)",
                                          path));
  }
  return token;
}

std::string url_encoded(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

}  // namespace

Result<std::string> open_pull_request(const ForgeConfig& forge, const PullRequest& request) {
  auto token = read_token(forge.token_file);
  if (!token) return tl::unexpected(token.error());
  std::string url;
  nlohmann::json body;
  std::string auth_header;
  if (forge.kind == "gitea") {
    url = fmt::format("{}/repos/{}/pulls", forge.api_url, forge.project);
    body = {{"title", request.title}, {"body", request.body}, {"head", request.head}, {"base", request.base}};
    auth_header = "Authorization: token " + *token;
  } else {
    url = fmt::format("{}/projects/{}/merge_requests", forge.api_url, url_encoded(forge.project));
    body = {{"title", request.title}, {"description", request.body}, {"source_branch", request.head},
            {"target_branch", request.base}};
    auth_header = "PRIVATE-TOKEN: " + *token;
  }
  const std::string payload = body.dump();

  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return fail(Errc::internal, "libcurl could not start a request");
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json");
  headers = curl_slist_append(headers, auth_header.c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> header_list(headers, curl_slist_free_all);
  std::string response;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, payload.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(forge.timeout_ms));
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &response);
  const CURLcode code = curl_easy_perform(curl.get());
  if (code != CURLE_OK) {
    return fail(Errc::unavailable, fmt::format("cannot reach the forge at {}: {}; the branch is pushed: open the pull "
                                               "request by hand, or check [release.forge] api_url",
                                               url, curl_easy_strerror(code)));
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status < 300) {
    auto reply = nlohmann::json::parse(response, nullptr, false);
    if (reply.is_object()) {
      for (const char* key : {"html_url", "web_url"}) {
        if (reply.contains(key) && reply[key].is_string()) return reply[key].get<std::string>();
      }
    }
    return std::string();
  }
  const Errc errc = status == 409 ? Errc::conflict : status >= 500 ? Errc::unavailable : Errc::internal;
  return fail(errc, fmt::format("the forge at {} answered {} to the pull request for {}: {}; the branch is pushed: "
                                "open the request by hand, or fix [release.forge]",
                                url, status, request.head, response.substr(0, 300)));
}

}  // namespace kiln::release
