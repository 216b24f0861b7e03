#pragma once
// The trajectory viewer's page (issue 16 item 4): one self-contained HTML document with the CSS and the
// JavaScript inline (no network, no CDN) and the data as JSON inside <script type="application/json">.
//
// Why the page is safe with hostile data (environment text is attacker-controlled):
//  * the JSON is made script-safe: every '<', '>' and '&' is written as \u003c, \u003e, \u0026, so no
//    "</script>" or "<!--" inside a summary or an observation can end the data element;
//  * the script renders every datum with textContent, never innerHTML;
//  * a strict Content-Security-Policy allows only the page's own inline script and style, by SHA-256 hash:
//    even an injected <script> would not run. `crl serve` sends the same policy as a header.
#include <string>
#include <string_view>

namespace crl::ui {

enum class PageMode {
  kFile,   // `crl inspect --html`: the data is embedded; the page may not fetch anything
  kServe,  // `crl serve` at /ui: no data embedded; the page fetches exports from its own origin
};

// The Content-Security-Policy of the page in this mode (hashes of the embedded script and style).
std::string content_security_policy(PageMode mode);
// JSON text made safe to sit inside a <script> element (see above); still valid JSON.
std::string script_safe_json(std::string_view json);
// The whole page. `data_json` is the viewer's data (ui/viewer_data.h), or "null" in serve mode.
std::string viewer_page(std::string_view data_json, PageMode mode);

}  // namespace crl::ui
