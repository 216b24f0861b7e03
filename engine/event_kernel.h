#pragma once
// A discrete-event kernel with a virtual clock.
//
// Time is an integer (SimTime, nanoseconds by convention) and events are ordered by (time, sequence number),
// where the sequence number is the order of scheduling: two events at the same time always run in the order
// they were scheduled (ns-3's EventKey). Nothing here reads the wall clock or iterates in pointer or hash
// order, so a run is a pure function of what was scheduled. The kernel is single-threaded; parallel runs use
// one kernel per worker and never share one.
//
// Events are small records (time, sequence, slot) in a 4-ary min-heap (half the depth of a binary heap for
// the same pending count); the process and tag live in a slot table whose entries are recycled through a
// free list, so scheduling allocates nothing once the tables have grown. Each slot knows its heap position,
// so cancel() removes an event at once in O(log n) and an EventId (slot, generation) that already ran or was
// cancelled is recognised as stale.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace crl {

using SimTime = int64_t;
inline constexpr SimTime kForever = std::numeric_limits<SimTime>::max();

class EventKernel;

// A process is anything that is woken by events: an episode, an inference server, a scheduler.
class Process {
 public:
  virtual ~Process() = default;
  // Called when an event scheduled for this process comes due; `tag` is the value given to schedule().
  // The process may schedule further events (for itself or others) and may cancel pending ones.
  virtual void wake(EventKernel& kernel, uint64_t tag) = 0;
};

struct EventId {
  uint32_t slot = 0;
  uint32_t generation = 0;  // 0 is never issued, so a default EventId is always stale
  friend bool operator==(EventId, EventId) = default;
};

class EventKernel {
 public:
  SimTime now() const { return now_; }
  size_t pending() const { return heap_.size(); }
  uint64_t processed() const { return processed_; }

  // Schedules `process->wake(kernel, tag)` at absolute time `at` (>= now()).
  EventId schedule_at(SimTime at, Process& process, uint64_t tag = 0);
  // Schedules after `delay` (>= 0) from now.
  EventId schedule_after(SimTime delay, Process& process, uint64_t tag = 0) {
    return schedule_at(now_ + delay, process, tag);
  }
  // Cancels a pending event. Returns false if it already ran, was cancelled, or never existed.
  bool cancel(EventId id);

  // Runs the next event, if any; returns false when nothing is pending.
  bool step();
  // Runs every event with time <= `until`, then sets the clock to `until` (if it is later than now).
  void run_until(SimTime until);
  // Runs until nothing is pending.
  void run() { run_until(kForever); }

 private:
  struct Event {
    SimTime time;
    uint64_t sequence;
    uint32_t slot;
    bool before(const Event& other) const {
      return time < other.time || (time == other.time && sequence < other.sequence);
    }
  };
  struct Slot {
    Process* process = nullptr;
    uint64_t tag = 0;
    uint32_t heap_position = 0;
    uint32_t generation = 0;  // bumped when the event runs or is cancelled
  };
  void place(size_t position, const Event& event) {
    heap_[position] = event;
    slots_[event.slot].heap_position = static_cast<uint32_t>(position);
  }
  void sift_up(size_t position, Event event);
  void sift_down(size_t position, Event event);
  void remove_at(size_t position);
  void release(uint32_t slot);

  std::vector<Event> heap_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  SimTime now_ = 0;
  uint64_t next_sequence_ = 0;
  uint64_t processed_ = 0;
};

}  // namespace crl
