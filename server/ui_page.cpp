#include "server/ui_page.h"

#include "ui/viewer_page.h"

namespace crl::server {

HttpAnswer ui_page_answer() {
  // Built once: the page is the same for every request (a few tens of kilobytes).
  static const std::string page = ui::viewer_page("null", ui::PageMode::kServe);
  return HttpAnswer{200, "text/html; charset=utf-8", page, 0};
}

const std::string& ui_page_policy() {
  static const std::string policy =
      ui::content_security_policy(ui::PageMode::kServe) + "; frame-ancestors 'none'";
  return policy;
}

}  // namespace crl::server
