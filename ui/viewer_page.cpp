#include "ui/viewer_page.h"

#include <map>

#include "engine/error.h"
#include "engine/sha256.h"
#include "ui/ui_assets.h"

namespace crl::ui {
namespace {

std::string base64(const uint8_t* data, size_t size) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t n = (uint32_t{data[i]} << 16) | (i + 1 < size ? uint32_t{data[i + 1]} << 8 : 0) |
                       (i + 2 < size ? uint32_t{data[i + 2]} : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// A CSP source expression for an inline element with exactly this content.
std::string hash_source(std::string_view content) {
  Sha256 sha;
  sha.update(content);
  const auto digest = sha.digest();
  return "'sha256-" + base64(digest.data(), digest.size()) + "'";
}

// Replaces each {{NAME}} of the template once, in one pass, so that substituted text (which may itself
// contain braces) is never scanned again. Every marker must be known and used exactly once.
std::string fill(std::string_view page, const std::map<std::string, std::string_view>& values) {
  std::string out;
  std::map<std::string, int> used;
  size_t pos = 0;
  while (true) {
    const size_t open = page.find("{{", pos);
    if (open == std::string_view::npos) break;
    const size_t close = page.find("}}", open);
    CRL_CHECK(close != std::string_view::npos, "ui/viewer.html: unclosed {{ marker");
    const std::string name(page.substr(open + 2, close - open - 2));
    const auto value = values.find(name);
    CRL_CHECK(value != values.end(), "ui/viewer.html: unknown marker {{" << name << "}}");
    out.append(page.substr(pos, open - pos));
    out.append(value->second);
    ++used[name];
    pos = close + 2;
  }
  out.append(page.substr(pos));
  for (const auto& [name, value] : values) {
    CRL_CHECK(used[name] == 1, "ui/viewer.html: marker {{" << name << "}} used " << used[name] << " times");
  }
  return out;
}

}  // namespace

std::string content_security_policy(PageMode mode) {
  // Nothing is allowed by default; the page's own script and style are allowed by hash (not
  // 'unsafe-inline'), images only as data: URLs. Serve mode may fetch exports from its own origin.
  return "default-src 'none'; script-src " + hash_source(assets::viewer_model_js) + " " +
         hash_source(assets::viewer_js) + "; style-src " + hash_source(assets::viewer_css) +
         "; img-src data:; connect-src " + (mode == PageMode::kServe ? "'self'" : "'none'") +
         "; base-uri 'none'; form-action 'none'";
}

std::string script_safe_json(std::string_view json) {
  std::string out;
  out.reserve(json.size() + json.size() / 16);
  for (char c : json) {
    // Outside strings JSON never holds these characters, and inside strings the \u escapes mean the same.
    if (c == '<') {
      out += "\\u003c";
    } else if (c == '>') {
      out += "\\u003e";
    } else if (c == '&') {
      out += "\\u0026";
    } else {
      out += c;
    }
  }
  return out;
}

std::string viewer_page(std::string_view data_json, PageMode mode) {
  const std::string csp = content_security_policy(mode);
  const std::string data = script_safe_json(data_json);
  return fill(assets::viewer_html, {{"CSP", csp},
                                    {"MODE", mode == PageMode::kServe ? "serve" : "file"},
                                    {"CSS", assets::viewer_css},
                                    {"MODEL_JS", assets::viewer_model_js},
                                    {"JS", assets::viewer_js},
                                    {"DATA", data}});
}

}  // namespace crl::ui
