#include "envs/text_cut.h"

namespace crl {

namespace {

bool continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

}  // namespace

std::string cut_middle(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  const std::string marker = "\n[... " + std::to_string(text.size()) + " bytes, middle cut ...]\n";
  const size_t keep = limit > marker.size() ? limit - marker.size() : 0;
  size_t head = keep / 3;
  size_t tail_from = text.size() - (keep - head);
  while (head > 0 && continuation_byte(text[head])) --head;
  while (tail_from < text.size() && continuation_byte(text[tail_from])) ++tail_from;
  return text.substr(0, head) + marker + text.substr(tail_from);
}

}  // namespace crl
