#include "engine/error.h"

#include <cstdio>
#include <cstdlib>

namespace crl {

namespace {
std::string compose_message(const std::string& where, const std::string& field, const std::string& message) {
  std::string text;
  if (!where.empty()) text += where + ": ";
  if (!field.empty()) text += "field '" + field + "': ";
  return text + message;
}
}  // namespace

Error::Error(std::string where, std::string field, std::string message)
    : std::runtime_error(compose_message(where, field, message)),
      where_(std::move(where)),
      field_(std::move(field)),
      message_(std::move(message)) {}

void fatal(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "crl: fatal: %s:%d: %s\n", file, line, message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace crl
