#pragma once
// Network::forward's and Network::backward's checks of a batch, for the CUDA twin: run on the host before
// anything reaches a device (a bad offset or head there would read out of bounds instead of failing), and by
// the stub too, so that a malformed batch fails the same way in every build. CRL_CHECK, as on the CPU: the
// batches are built by the policy, so a bad one is a bug of ours.
#include <span>

#include "engine/error.h"
#include "policies/neural/network.h"

namespace crl::neural {

inline void check_batch(const Network& net, const DecisionBatch& b) {
  const NetworkShape& s = net.shape();
  CRL_CHECK(b.x.cols() == s.inputs, "rows of " << b.x.cols() << " features, network has " << s.inputs);
  CRL_CHECK(static_cast<int>(b.offsets.size()) == b.groups() + 1 && b.offsets.front() == 0 &&
                b.offsets.back() == b.x.rows(),
            "group offsets do not cover the rows");
  CRL_CHECK(b.head.empty() || static_cast<int>(b.head.size()) == b.groups(), "group heads");
  CRL_CHECK(static_cast<int64_t>(net.parameters().size()) == s.size(),
            "network of " << net.parameters().size() << " parameters, shape needs " << s.size());
  for (int g = 0; g < b.groups(); ++g) {
    const int begin = b.offsets[g], end = b.offsets[g + 1], k = b.head_of(g);
    CRL_CHECK(end > begin && b.chosen[g] >= 0 && b.chosen[g] < end - begin, "group " << g);
    CRL_CHECK(k >= 0 && k < s.heads, "group " << g << ": head " << k << " of " << s.heads);
  }
}

// backward's inputs: one dlogp and one dvalue per group, and a forward result of this batch and network
// (its activations are uploaded).
inline void check_backward(const Network& net, const DecisionBatch& b, const ForwardResult& f,
                           std::span<const float> dlogp, std::span<const float> dvalue) {
  check_batch(net, b);
  const int rows = static_cast<int>(b.x.rows()), groups = b.groups(), hidden = net.shape().hidden;
  CRL_CHECK(static_cast<int>(dlogp.size()) == groups && static_cast<int>(dvalue.size()) == groups,
            "gradient sizes");
  CRL_CHECK(f.hidden.rows() == rows && f.hidden.cols() == hidden &&
                static_cast<int>(f.probs.size()) == rows && f.pooled.rows() == groups &&
                f.pooled.cols() == hidden,
            "forward result of another batch or network");
}

}  // namespace crl::neural
