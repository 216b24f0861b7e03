#pragma once
// The viewer's page files, embedded at build time by ui/embed.cmake (the generated ui_assets.cpp lives in
// the build folder). Edit ui/viewer.html, .css, viewer_model.js, viewer.js; the next build picks them up.
#include <string_view>

namespace crl::ui::assets {

extern const std::string_view viewer_html;
extern const std::string_view viewer_css;
extern const std::string_view viewer_model_js;
extern const std::string_view viewer_js;

}  // namespace crl::ui::assets
