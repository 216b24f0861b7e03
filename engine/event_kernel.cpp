#include "engine/event_kernel.h"

#include "engine/error.h"

namespace crl {

namespace {
constexpr size_t kArity = 4;
}

EventId EventKernel::schedule_at(SimTime at, Process& process, uint64_t tag) {
  CRL_CHECK(at >= now_, "event scheduled in the past: at=" << at << " now=" << now_);
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(Slot{});
  }
  Slot& s = slots_[slot];
  s.process = &process;
  s.tag = tag;
  ++s.generation;
  if (s.generation == 0) s.generation = 1;  // after 2^32 reuses; 0 stays reserved for "never issued"
  heap_.push_back(Event{});
  sift_up(heap_.size() - 1, Event{at, next_sequence_++, slot});
  return EventId{slot, s.generation};
}

bool EventKernel::cancel(EventId id) {
  if (id.slot >= slots_.size() || id.generation == 0) return false;
  Slot& s = slots_[id.slot];
  if (s.generation != id.generation || s.process == nullptr) return false;
  remove_at(s.heap_position);
  release(id.slot);
  return true;
}

bool EventKernel::step() {
  if (heap_.empty()) return false;
  const Event top = heap_[0];
  remove_at(0);
  Slot& s = slots_[top.slot];
  Process* process = s.process;
  const uint64_t tag = s.tag;
  release(top.slot);
  now_ = top.time;
  ++processed_;
  process->wake(*this, tag);
  return true;
}

void EventKernel::run_until(SimTime until) {
  while (!heap_.empty() && heap_[0].time <= until) step();
  if (until != kForever && until > now_) now_ = until;
}

void EventKernel::release(uint32_t slot) {
  slots_[slot].process = nullptr;
  ++slots_[slot].generation;  // makes every EventId naming this use of the slot stale
  free_slots_.push_back(slot);
}

void EventKernel::remove_at(size_t position) {
  const Event last = heap_.back();
  heap_.pop_back();
  if (position == heap_.size()) return;
  // The last event fills the hole; it may have to move either way.
  if (position > 0 && last.before(heap_[(position - 1) / kArity])) {
    sift_up(position, last);
  } else {
    sift_down(position, last);
  }
}

void EventKernel::sift_up(size_t position, Event event) {
  while (position > 0) {
    const size_t parent = (position - 1) / kArity;
    if (!event.before(heap_[parent])) break;
    place(position, heap_[parent]);
    position = parent;
  }
  place(position, event);
}

void EventKernel::sift_down(size_t position, Event event) {
  const size_t size = heap_.size();
  while (true) {
    const size_t first = position * kArity + 1;
    if (first >= size) break;
    size_t best = first;
    const size_t last = std::min(first + kArity, size);
    for (size_t child = first + 1; child < last; ++child) {
      if (heap_[child].before(heap_[best])) best = child;
    }
    if (!heap_[best].before(event)) break;
    place(position, heap_[best]);
    position = best;
  }
  place(position, event);
}

}  // namespace crl
