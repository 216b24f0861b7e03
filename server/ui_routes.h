#pragma once
// The operator's lists behind the viewer (GET /ui), on with `crl serve --ui` and off by default:
//
//   GET /v1/episodes?limit=N&offset=K   EpisodeList: live episodes, newest first (id, env, view, task id,
//                                       status running|done, steps, compactions, created time)
//   GET /v1/exports?limit=N&offset=K    EpisodeList: the ring of recently finished episodes (the last
//                                       --keep-exports N, default 32), newest first, with their final status
//   GET /v1/exports/{id}                ExportResponse: one of them, also after DELETE or the idle reaper
//
// limit: 1 .. 1000 (default 100); offset: from 0. Anything else is 400 bad_query naming the parameter.
//
// Why opt-in. Episode ids are 128 random bits and act as capabilities: the trainer protocol never lists them,
// so one client (or an agent inside a sandbox that reaches the API) cannot read or step another's episodes.
// These lists hand every id to whoever can reach the server, so they are an operator feature for a server on
// loopback or behind the operator's own access control. Off, the three routes answer 404 ui_disabled saying
// how to turn them on (and nothing about the episodes). The page at /ui is served either way; it shows the
// lists when they answer and otherwise opens an episode by id or a local export file.
#include <optional>
#include <string_view>
#include <vector>

#include "server/router.h"
#include "wire/wire_codec.h"

namespace crl::server {

// The answer of a list route, or nullopt when the call is none of them (only GET /v1/episodes is: POST
// creates). Throws ApiError (404 ui_disabled, 400 bad_query, 404 unknown_export); the router types it.
std::optional<HttpAnswer> route_ui_lists(EpisodeService& service, const HttpCall& call,
                                         const std::vector<std::string_view>& parts, wire::WireFormat format);

}  // namespace crl::server
