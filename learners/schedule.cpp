#include "learners/schedule.h"

#include "engine/error.h"

namespace crl::learners {

Schedule::Schedule(ScheduleOptions options) : options_(options) {
  if (options_.warmup_batches < 0) throw Error("schedule", "warmup_batches", "expected a count >= 0");
  if (options_.critic_per_actor < 0) throw Error("schedule", "critic_per_actor", "expected a count >= 0");
}

bool Schedule::actor_gate_open(const Batch& batch) const {
  if (!options_.actor_gate) return true;
  for (double reward : batch.rewards) {
    if (reward > options_.gate_threshold) return true;
  }
  return false;
}

std::vector<UpdateKind> Schedule::updates(int64_t batches_done, const Batch& batch) const {
  CRL_CHECK(batches_done >= 0, "negative batch counter " << batches_done);
  if (batches_done < options_.warmup_batches) return {UpdateKind::kCritic};
  std::vector<UpdateKind> out(options_.critic_per_actor, UpdateKind::kCritic);
  if (actor_gate_open(batch)) out.push_back(UpdateKind::kActor);
  return out;
}

}  // namespace crl::learners
