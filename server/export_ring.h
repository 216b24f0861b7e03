#pragma once
// The ring of recently finished exports, for the viewer (`crl serve --ui`): the last `capacity` episodes that
// ended (`--keep-exports N`, default 32), with their export, so that GET /ui can list and open them after the
// episode was deleted or reaped. Bounded twice: by count, and by the bytes of the exports it holds (the
// oldest go first), because one export can be as large as the episode's whole token history. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "proto/server.pb.h"

namespace crl::server {

class ExportRing {
 public:
  ExportRing(size_t capacity, size_t max_bytes);

  // Adds a finished episode's export (an id already held is replaced). Nothing when the capacity is 0.
  void add(proto::EpisodeSummary summary, proto::ExportResponse export_response);
  // Newest first: at most `limit` entries from `offset`; `total` is the ring's size.
  proto::EpisodeList list(size_t offset, size_t limit) const;
  // The export of `episode_id`, or nullptr (no longer or never held).
  std::shared_ptr<const proto::ExportResponse> find(const std::string& episode_id) const;
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    proto::EpisodeSummary summary;
    std::shared_ptr<const proto::ExportResponse> data;
    size_t bytes = 0;
  };
  const size_t capacity_;
  const size_t max_bytes_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;  // oldest first
  size_t bytes_ = 0;
};

}  // namespace crl::server
