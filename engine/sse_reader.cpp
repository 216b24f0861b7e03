#include "engine/sse_reader.h"

namespace crl {

bool SseReader::feed(std::string_view bytes) {
  if (!error_.empty()) return false;
  if (at_ > 0 && at_ * 2 >= buffer_.size()) {  // (drop what was read before the buffer grows)
    buffer_.erase(0, at_);
    at_ = 0;
  }
  buffer_.append(bytes);
  if (pending() > max_event_bytes_) {
    error_ = "an event grew past " + std::to_string(max_event_bytes_) + " bytes";
    return false;
  }
  return true;
}

bool SseReader::line(std::string_view text) {
  if (text.empty()) {
    if (!has_data_) {  // (nothing to dispatch: the fields are forgotten)
      pending_.name.clear();
      return false;
    }
    return true;
  }
  if (text.front() == ':') return false;  // a comment (a keep-alive)
  const size_t colon = text.find(':');
  const std::string_view field = text.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) pending_.data += '\n';
    pending_.data += value;
    has_data_ = true;
  } else if (field == "event") {
    pending_.name = std::string(value);
  }
  return false;
}

bool SseReader::next(SseEvent& event) {
  while (error_.empty()) {
    if (skip_newline_ && at_ < buffer_.size()) {
      if (buffer_[at_] == '\n') ++at_;
      skip_newline_ = false;
    }
    const size_t end = buffer_.find_first_of("\r\n", at_);
    if (end == std::string::npos) return false;
    const std::string_view text(buffer_.data() + at_, end - at_);
    skip_newline_ = buffer_[end] == '\r';
    at_ = end + 1;
    if (line(text)) {
      event = std::move(pending_);
      pending_ = SseEvent{};
      has_data_ = false;
      return true;
    }
  }
  return false;
}

}  // namespace crl
