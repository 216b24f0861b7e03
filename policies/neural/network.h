#pragma once
// The small network of the neural policy: ONE pointer MLP shared by every role (the trunk), with one output
// head per role and one value head (CPU reference, Eigen, float).
//
// A decision (one sampled token) is a group of candidate rows x_r (features of a record, of "keep the task",
// or of "stop"; see features.h) answered by one head k (an answer head per task type, the summary head). For
// a batch of rows X (rows x inputs) and groups g = [begin_g, end_g) with heads k_g:
//   Z = X W1 + b1,  H = relu(Z)                       (rows x hidden)    the shared trunk
//   s_r = H_r . w_k + b_k                             candidate scores (logits), k = k_g of r's group
//   logp_g = s_{c_g} - logsumexp(s over g)            c_g = the chosen row of g
//   v_g = mean(H over g) . wv + bv                    the critic value of the decision (one value head)
// Why a shared trunk: the paper trains ONE model that both acts and summarizes, so what the actor loss of
// one role teaches moves the other role's behaviour. With separate networks, masking the summary loss
// ("w/o sum.") left the summary policy at its initialisation, i.e. it was the frozen arm. Here the summary
// head's scores move with W1 and b1 even when its own w_k, b_k get no gradient.
//
// Initialisation: W1 from Rng(seed, StreamRole::kLearner) scaled by sqrt(6 / inputs), b1 = 0; the heads'
// w_k small (uniform, kHeadInitScale of a unit-variance readout: initial scores differ by about a tenth of a
// logit, so every initial policy is close to uniform); b_k, wv, bv = 0, so every initial value is 0 (spec
// 1.5: a zero-reward replay gives zero values, returns, advantages and gradients). Why w_k is not zero: a
// head at zero that gets no gradient of its own (the masked summary head) would stay exactly uniform
// whatever the trunk learns, and "w/o sum." would again be the frozen arm. (A shared readout added to every
// head did couple them too, but it made the answer heads interfere: the ordered plan learned much slower.)
// The value head reads H without passing gradient into the trunk (the trunk belongs to the actor), so the
// critic and the actor have disjoint parameters and their updates (the schedule's critic and actor passes)
// commute.
//
// Parameters are one flat float vector: [W1 (column-major, inputs x hidden) | b1 | w (hidden x heads,
// column-major: head after head) | b (heads) | wv | bv]; the actor part is everything before wv.
// backward() writes gradients in the same layout. The CUDA twin (cuda/network_cuda.h) implements this
// network, every head, in the same layout (the policy's `backend: cuda`, neural_policy.h).
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

namespace crl::neural {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr float kHeadInitScale = 0.1f;

struct NetworkShape {
  int inputs = 0;
  int hidden = 0;
  int heads = 1;  // policy output heads
  int64_t w1() const { return 0; }
  int64_t b1() const { return static_cast<int64_t>(inputs) * hidden; }
  int64_t w(int head) const { return b1() + hidden + static_cast<int64_t>(head) * hidden; }
  int64_t b(int head) const { return w(heads) + head; }
  int64_t wv() const { return b(heads); }
  int64_t bv() const { return wv() + hidden; }
  int64_t size() const { return bv() + 1; }
  int64_t actor_size() const { return wv(); }  // [0, wv) are the actor's parameters
  int64_t trunk_size() const { return w(0); }  // [0, w(0)): W1 and b1, shared by every head
};

// A batch of decisions: the candidate rows, group offsets (groups + 1 entries, from 0 to rows), the chosen
// row of each group (an index into the group, 0-based) and the head of each group (empty: head 0).
struct DecisionBatch {
  RowMatrix x;
  std::vector<int> offsets{0};
  std::vector<int> chosen;
  std::vector<int> head;
  int groups() const { return static_cast<int>(chosen.size()); }
  int head_of(int g) const { return head.empty() ? 0 : head[g]; }
};

// What forward() computes, kept for backward().
struct ForwardResult {
  RowMatrix hidden;            // H (rows x hidden)
  std::vector<float> scores;   // s (rows)
  std::vector<float> probs;    // softmax of s within each group (rows)
  std::vector<float> logp;     // log-prob of the chosen row (groups)
  std::vector<float> entropy;  // entropy of each group's distribution (groups)
  std::vector<float> values;   // v (groups)
  RowMatrix pooled;            // mean of H over each group (groups x hidden)
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

  // Scores (head `head`) and value of one group only (the sampling path): the rows of one request's decision.
  void score(const RowMatrix& rows, int head, std::vector<double>& scores, float& value) const;

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
