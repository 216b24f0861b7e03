#pragma once
// The small network of the neural policy: a pointer MLP over candidate rows, with a softmax per decision and
// a zero-initialised value head (CPU reference, Eigen, float).
//
// A decision (one sampled token) is a group of candidate rows x_r (features of a record, of "keep the task",
// or of "stop"; see features.h). For a batch of rows X (rows x inputs) and groups g = [begin_g, end_g):
//   Z = X W1 + b1,  H = relu(Z)                       (rows x hidden)
//   s = H w2 + b2                                     candidate scores (logits)
//   logp_g = s_{c_g} - logsumexp(s over g)            c_g = the chosen row of g
//   v_g = mean(H over g) . wv + bv                    the critic value of the decision
// w2, b2, wv, bv start at zero: every initial policy is uniform over its candidates and every initial value
// is 0 (spec 1.5: a zero-reward replay gives zero values, returns, advantages and gradients). W1 is drawn
// from Rng(seed, StreamRole::kLearner) scaled by sqrt(2 / inputs); b1 = 0. The value head reads H without
// passing gradient into W1 (the trunk belongs to the actor), so the critic and the actor have disjoint
// parameters and their updates (the schedule's critic and actor passes) commute.
//
// Parameters are one flat float vector: [W1 (column-major, inputs x hidden) | b1 | w2 | b2 | wv | bv]; the
// actor part is everything before wv. backward() writes gradients in the same layout. The CUDA twin
// (cuda/network_cuda.h) runs the same forward and backward with cuBLAS and must match to float rounding.
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

namespace crl::neural {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct NetworkShape {
  int inputs = 0;
  int hidden = 0;
  int64_t w1() const { return 0; }
  int64_t b1() const { return static_cast<int64_t>(inputs) * hidden; }
  int64_t w2() const { return b1() + hidden; }
  int64_t b2() const { return w2() + hidden; }
  int64_t wv() const { return b2() + 1; }
  int64_t bv() const { return wv() + hidden; }
  int64_t size() const { return bv() + 1; }
  int64_t actor_size() const { return wv(); }  // [0, wv) are the actor's parameters
};

// A batch of decisions: the candidate rows, group offsets (groups + 1 entries, from 0 to rows) and the
// chosen row of each group (an index into the group, 0-based).
struct DecisionBatch {
  RowMatrix x;
  std::vector<int> offsets{0};
  std::vector<int> chosen;
  int groups() const { return static_cast<int>(chosen.size()); }
};

// What forward() computes, kept for backward().
struct ForwardResult {
  RowMatrix hidden;           // H (rows x hidden)
  std::vector<float> scores;  // s (rows)
  std::vector<float> probs;   // softmax of s within each group (rows)
  std::vector<float> logp;    // log-prob of the chosen row (groups)
  std::vector<float> values;  // v (groups)
  RowMatrix pooled;           // mean of H over each group (groups x hidden)
};

class Network {
 public:
  Network() = default;
  explicit Network(NetworkShape shape);
  const NetworkShape& shape() const { return shape_; }

  // W1 from the seed's stream, everything else zero.
  void initialize(uint64_t seed, uint32_t tag);
  std::vector<float>& parameters() { return params_; }
  const std::vector<float>& parameters() const { return params_; }

  ForwardResult forward(const DecisionBatch& batch) const;
  // Gradients of sum_g (dlogp[g] logp_g + dvalue[g] v_g) with respect to every parameter (size() floats).
  std::vector<float> backward(const DecisionBatch& batch, const ForwardResult& forward,
                              std::span<const float> dlogp, std::span<const float> dvalue) const;

  // Scores and value of one group only (the sampling path): the rows of one request's decision.
  void score(const RowMatrix& rows, std::vector<double>& scores, float& value) const;

 private:
  NetworkShape shape_;
  std::vector<float> params_;
};

// Adam (Kingma and Ba) over a range [begin, end) of a parameter vector; deterministic, one thread.
class Adam {
 public:
  Adam() = default;
  Adam(int64_t begin, int64_t end, double beta1 = 0.9, double beta2 = 0.999, double epsilon = 1e-8);
  void reset();
  void step(std::vector<float>& params, std::span<const float> gradients, double lr);
  int64_t steps() const { return t_; }
  // The moment estimates (for checkpoints): size end - begin each.
  const std::vector<float>& first_moment() const { return m_; }
  const std::vector<float>& second_moment() const { return v_; }
  int64_t size() const { return end_ - begin_; }
  // Restores a saved state; the sizes must be size() (the caller checks them).
  void restore(int64_t steps, std::vector<float> m, std::vector<float> v) {
    t_ = steps;
    m_ = std::move(m);
    v_ = std::move(v);
  }

 private:
  int64_t begin_ = 0, end_ = 0;
  double beta1_ = 0.9, beta2_ = 0.999, epsilon_ = 1e-8;
  std::vector<float> m_, v_;
  int64_t t_ = 0;
};

}  // namespace crl::neural
