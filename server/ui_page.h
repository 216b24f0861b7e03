#pragma once
// GET /ui: the trajectory viewer's page (ui/), served for live sessions. The page holds no data; it fetches
// GET /v1/episodes/{id}/export from this server (or opens a local export file). It carries its
// Content-Security-Policy in a <meta> element, and the transport sends ui_page_policy() as a header with
// every text/html answer (this page is the only one).
#include <string>

#include "server/router.h"

namespace crl::server {

HttpAnswer ui_page_answer();
// The page's policy as a header: the <meta> policy plus what only a header can say (frame-ancestors).
const std::string& ui_page_policy();

}  // namespace crl::server
