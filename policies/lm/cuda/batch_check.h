#pragma once
// The CPU's input checks for the CUDA twin (and its stub). The batch validation, without copying it:
// LmModel::check is private, so a parameter-free model of the same vocab and max_positions (d_model 1, no
// layers) runs its forward, whose first step is that check. The cost is one T x vocab product of width 1,
// negligible next to the device pass. Throws the CPU's std::invalid_argument ("lm batch: ...").
#include <span>
#include <stdexcept>
#include <string>

#include "policies/lm/cpu/model.h"
#include "policies/lm/cpu/sampler.h"

namespace crl::lm::cuda_detail {

// cuda_sample's input checks: the CPU's (sampler.h check_sampling), so bad input reads the same everywhere.
inline void check_sample_like_cpu(const LmModel& model, std::span<const SampleRequest> requests,
                                  const SamplingParams& params) {
  check_sampling(model.config(), requests, params);
}

inline void check_decoder_slots(int slots) {
  if (slots < 1)
    throw std::invalid_argument("lm cuda: a decoder needs at least one slot, got " + std::to_string(slots));
}

inline void check_batch_like_cpu(const LmModel& model, const PackedBatch& batch) {
  LmConfig probe;
  probe.vocab = model.config().vocab;
  probe.max_positions = model.config().max_positions;
  probe.d_model = 1;
  probe.heads = 1;
  probe.layers = 0;
  probe.d_ff = 1;
  (void)LmModel(probe).forward(batch);
}

}  // namespace crl::lm::cuda_detail
