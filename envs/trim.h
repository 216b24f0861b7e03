#pragma once
// One trim for the text environments and the coding project's interpreter (no dependency on Env).
#include <cctype>
#include <string>

namespace crl {

// `s` without leading and trailing ASCII white space.
inline std::string trim_space(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

}  // namespace crl
