#include "server/export_ring.h"

#include <algorithm>

namespace crl::server {

ExportRing::ExportRing(size_t capacity, size_t max_bytes) : capacity_(capacity), max_bytes_(max_bytes) {}

void ExportRing::add(proto::EpisodeSummary summary, proto::ExportResponse export_response) {
  if (capacity_ == 0) return;
  Entry entry;
  entry.bytes = export_response.ByteSizeLong();
  entry.summary = std::move(summary);
  entry.data = std::make_shared<const proto::ExportResponse>(std::move(export_response));
  std::lock_guard lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->summary.episode_id() == entry.summary.episode_id()) {
      bytes_ -= it->bytes;
      entries_.erase(it);
      break;
    }
  }
  bytes_ += entry.bytes;
  entries_.push_back(std::move(entry));
  // The newest entry stays even when it alone is above the byte bound (the bound is on what is kept besides).
  while (entries_.size() > capacity_ || (entries_.size() > 1 && bytes_ > max_bytes_)) {
    bytes_ -= entries_.front().bytes;
    entries_.pop_front();
  }
}

proto::EpisodeList ExportRing::list(size_t offset, size_t limit) const {
  std::lock_guard lock(mutex_);
  proto::EpisodeList out;
  out.set_total(static_cast<uint32_t>(entries_.size()));
  out.set_offset(static_cast<uint32_t>(offset));
  out.set_limit(static_cast<uint32_t>(limit));
  for (size_t i = offset; i < entries_.size() && i < offset + limit; ++i) {
    *out.add_episodes() = entries_[entries_.size() - 1 - i].summary;
  }
  return out;
}

std::shared_ptr<const proto::ExportResponse> ExportRing::find(const std::string& episode_id) const {
  std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (e.summary.episode_id() == episode_id) return e.data;
  }
  return nullptr;
}

size_t ExportRing::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace crl::server
