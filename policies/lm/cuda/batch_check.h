#pragma once
// The CPU's batch validation for the CUDA twin (and its stub), without copying it: LmModel::check is
// private, so a parameter-free model of the same vocab and max_positions (d_model 1, no layers) runs its
// forward, whose first step is that check. The cost is one T x vocab product of width 1, negligible next to
// the device pass. Throws the CPU's std::invalid_argument ("lm batch: ...").
#include <stdexcept>

#include "policies/lm/cpu/model.h"

namespace crl::lm::cuda_detail {

inline void check_batch_like_cpu(const LmModel& model, const PackedBatch& batch) {
  if (model.config().rope)
    throw std::invalid_argument("lm cuda: rotary positions (rope) are not implemented on the device");
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
