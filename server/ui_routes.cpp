#include "server/ui_routes.h"

#include <charconv>

#include "wire/api_error.h"

namespace crl::server {

using wire::ApiError;

namespace {

constexpr size_t kDefaultLimit = 100, kMaxLimit = 1000;

// The value of `name` in the query string of `target` ("" when absent).
std::optional<std::string_view> query_value(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) return eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

size_t query_number(std::string_view target, std::string_view name, size_t fallback, size_t low,
                    size_t high) {
  const std::optional<std::string_view> text = query_value(target, name);
  if (!text) return fallback;
  size_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error != std::errc() || end != text->data() + text->size() || value < low || value > high) {
    throw ApiError(400, "bad_query",
                   "query parameter " + std::string(name) + "=\"" + std::string(text->substr(0, 64)) +
                       "\" is not an integer in " + std::to_string(low) + " .. " + std::to_string(high),
                   std::string(name));
  }
  return value;
}

HttpAnswer ok_answer(const google::protobuf::Message& message, wire::WireFormat format) {
  return HttpAnswer{200, std::string(wire::content_type(format)), wire::encode_message(message, format), 0};
}

}  // namespace

std::optional<HttpAnswer> route_ui_lists(EpisodeService& service, const HttpCall& call,
                                         const std::vector<std::string_view>& parts,
                                         wire::WireFormat format) {
  if (parts.size() < 2 || parts[0] != "v1") return std::nullopt;
  const bool episodes = parts.size() == 2 && parts[1] == "episodes" && call.method == "GET";
  const bool exports = (parts.size() == 2 || parts.size() == 3) && parts[1] == "exports";
  if (!episodes && !exports) return std::nullopt;
  const std::string path(call.target.substr(0, call.target.find('?')));
  if (!service.options().ui) {
    throw ApiError(404, "ui_disabled",
                   "the lists of episodes and exports (GET /v1/episodes, /v1/exports) are off: they are an "
                   "operator feature that names every client's episodes; start the server with `crl serve "
                   "--ui` to turn them on",
                   "");
  }
  if (call.method != "GET") {
    throw ApiError(405, "method_not_allowed",
                   std::string(call.method) + " is not allowed on " + path + " (use GET)", "");
  }
  if (parts.size() == 3) return ok_answer(service.recent_export(std::string(parts[2])), format);
  const size_t limit = query_number(call.target, "limit", kDefaultLimit, 1, kMaxLimit);
  const size_t offset = query_number(call.target, "offset", 0, 0, 1u << 30);
  return ok_answer(episodes ? service.list_episodes(offset, limit) : service.list_exports(offset, limit),
                   format);
}

}  // namespace crl::server
