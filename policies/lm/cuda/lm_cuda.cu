// The language model's training pass on a CUDA device; see lm_cuda.h. Matrix products are cuBLAS SGEMMs on
// row-major matrices by the usual transpose trick: a row-major M x N matrix is a column-major N x M one, so
// C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T (column-major), see gemm(). The kernels are in
// lm_kernels.cuh. Step by step this is model.cpp's forward and backward, in the same order.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cuda/cublas_library.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/device.h"
#include "engine/error.h"
#include "policies/lm/cuda/batch_check.h"
#include "policies/lm/cuda/lm_cuda.h"
#include "policies/lm/cuda/lm_kernels.cuh"

namespace crl::lm {

namespace {

using kernels::kBlock;

int blocks(int64_t n) {
  return static_cast<int>((n + kBlock - 1) / kBlock);
}

template <typename T>
struct Device {
  T* data = nullptr;
  size_t n = 0;
  Device() = default;
  explicit Device(size_t count) : n(count) {
    if (n > 0) CRL_CUDA_CHECK(cudaMalloc(&data, n * sizeof(T)));
  }
  Device(const T* host, size_t count) : Device(count) {
    if (n > 0) CRL_CUDA_CHECK(cudaMemcpy(data, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Device() {
    if (data) cudaFree(data);
  }
  Device(Device&& o) noexcept : data(o.data), n(o.n) {
    o.data = nullptr;
    o.n = 0;
  }
  Device& operator=(Device&& o) noexcept {
    std::swap(data, o.data);
    std::swap(n, o.n);
    return *this;
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void zero() {
    if (n > 0) CRL_CUDA_CHECK(cudaMemset(data, 0, n * sizeof(T)));
  }
  void to_host(T* host, size_t count) const {
    if (count > 0) CRL_CUDA_CHECK(cudaMemcpy(host, data, count * sizeof(T), cudaMemcpyDeviceToHost));
  }
  void copy_from(const Device& o) {
    if (n > 0) CRL_CUDA_CHECK(cudaMemcpy(data, o.data, n * sizeof(T), cudaMemcpyDeviceToDevice));
  }
  void from_host(const T* host, size_t count) {
    if (count > 0) CRL_CUDA_CHECK(cudaMemcpy(data, host, count * sizeof(T), cudaMemcpyHostToDevice));
  }
};

using Handle = cuda::CublasHandle;

// Row-major C (M x N) = beta C + op(A) op(B), op(A) M x K, op(B) K x N; A is stored M x K (K x M when
// transposed), B K x N (N x K when transposed). Column-major: C^T = op(B)^T op(A)^T with leading dimensions
// the stored row lengths.
void gemm(const Handle& handle, bool trans_a, bool trans_b, int M, int N, int K, const float* A,
          const float* B, float* C, float beta) {
  if (M == 0 || N == 0) return;
  const float one = 1.0f;
  CRL_CUBLAS_CHECK(cuda::cublas().sgemm(handle.h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B,
                                        trans_b ? K : N, A, trans_a ? M : K, &beta, C, N));
}

// The batch's index arrays on the device: per token its position and sequence, per sequence its offset and
// the start of its attention probabilities.
struct DeviceBatch {
  int T = 0;
  int64_t prob_size = 0;  // per layer: heads * sum n^2
  Device<int> tokens, targets, pos, seq, offsets;
  Device<int64_t> base;
  DeviceBatch(const PackedBatch& b, int heads) : T(b.size()) {
    std::vector<int> p(T), s(T);
    std::vector<int64_t> bs(b.sequences());
    for (int k = 0; k < b.sequences(); ++k) {
      const int n = b.offsets[k + 1] - b.offsets[k];
      bs[k] = prob_size;
      prob_size += int64_t{heads} * n * n;
      for (int t = b.offsets[k]; t < b.offsets[k + 1]; ++t) {
        p[t] = t - b.offsets[k];
        s[t] = k;
      }
    }
    tokens = Device<int>(b.tokens.data(), b.tokens.size());
    targets = Device<int>(b.targets.data(), b.targets.size());
    pos = Device<int>(p.data(), p.size());
    seq = Device<int>(s.data(), s.size());
    offsets = Device<int>(b.offsets.data(), b.offsets.size());
    base = Device<int64_t>(bs.data(), bs.size());
  }
  kernels::AttnIndex index() const { return {seq.data, offsets.data, base.data}; }
};

// The activations of one block (LayerCache's twin); x_in of block b + 1 is x_out of block b.
struct DeviceLayer {
  Device<float> x_in, a, inv1, qkv, probs, attn, x_mid, m, inv2, u, g;
};

void check_launch() {
  CRL_CUDA_CHECK(cudaGetLastError());
}

// The CPU's rotary tables (RopeTable) on the device; empty for a model with learned positions.
struct DeviceRope {
  bool on = false;
  Device<float> cosines, sines;
  DeviceRope() = default;
  explicit DeviceRope(const LmModel& model) : on(model.config().rope) {
    if (!on) return;
    const RopeTable& table = model.rope();
    cosines = Device<float>(table.cosines().data(), table.cosines().size());
    sines = Device<float>(table.sines().data(), table.sines().size());
  }
  // Turns the query and key heads of `rows` qkv rows (3d wide) by their positions pos[r], as model.cpp does
  // after the QKV product (inverse: back, as its backward does to dqkv). Nothing without rope.
  void rotate(float* qkv, const int* pos, int rows, int d, int heads, bool inverse) const {
    if (!on || rows == 0) return;
    kernels::rope_rotate<<<blocks(int64_t{rows} * d), kBlock>>>(qkv, pos, cosines.data, sines.data, rows, d,
                                                                heads, inverse ? 1 : 0);
    check_launch();
  }
};

// Everything forward leaves on the device.
struct DeviceForward {
  Device<float> params;
  DeviceRope rope;
  std::vector<DeviceLayer> layers;
  Device<float> x_final, inv_f, hidden, logits, lse, logp, values;
};

void run_forward(const Handle& handle, const LmModel& model, const DeviceBatch& b, DeviceForward& f) {
  const LmConfig& c = model.config();
  const ParamLayout& l = model.layout();
  const int T = b.T, d = c.d_model, H = c.heads, ff = c.d_ff, V = c.vocab;
  const size_t Td = static_cast<size_t>(T) * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  const float* P = f.params.data;
  Device<float> x(Td);
  kernels::embed<<<blocks(static_cast<int64_t>(Td)), kBlock>>>(
      P + l.tok_emb(), c.rope ? nullptr : P + l.pos_emb(), b.tokens.data, b.pos.data, x.data, T, d);
  check_launch();
  f.layers.resize(c.layers);
  for (int k = 0; k < c.layers; ++k) {
    const BlockLayout bl = l.block(k);
    DeviceLayer& L = f.layers[k];
    L.x_in = std::move(x);
    L.a = Device<float>(Td);
    L.inv1 = Device<float>(T);
    kernels::rmsnorm_forward<<<T, kBlock>>>(L.x_in.data, P + bl.norm1, c.norm_eps, L.a.data, L.inv1.data, d);
    L.qkv = Device<float>(Td * 3);
    gemm(handle, false, false, T, 3 * d, d, L.a.data, P + bl.wqkv, L.qkv.data, 0.0f);
    f.rope.rotate(L.qkv.data, b.pos.data, T, d, H, false);  // the cache keeps the rotated queries and keys
    L.probs = Device<float>(static_cast<size_t>(b.prob_size));
    L.attn = Device<float>(Td);
    kernels::attention_forward<<<dim3(T, H), kBlock>>>(L.qkv.data, b.index(), L.probs.data, L.attn.data, d, H,
                                                       scale);
    check_launch();
    L.x_mid = Device<float>(Td);
    L.x_mid.copy_from(L.x_in);
    gemm(handle, false, false, T, d, d, L.attn.data, P + bl.wo, L.x_mid.data, 1.0f);
    L.m = Device<float>(Td);
    L.inv2 = Device<float>(T);
    kernels::rmsnorm_forward<<<T, kBlock>>>(L.x_mid.data, P + bl.norm2, c.norm_eps, L.m.data, L.inv2.data, d);
    L.u = Device<float>(static_cast<size_t>(T) * ff);
    gemm(handle, false, false, T, ff, d, L.m.data, P + bl.w1, L.u.data, 0.0f);
    L.g = Device<float>(static_cast<size_t>(T) * ff);
    kernels::gelu_forward<<<blocks(int64_t{T} * ff), kBlock>>>(L.u.data, L.g.data, int64_t{T} * ff);
    check_launch();
    x = Device<float>(Td);
    x.copy_from(L.x_mid);
    gemm(handle, false, false, T, d, ff, L.g.data, P + bl.w2, x.data, 1.0f);
  }
  f.x_final = std::move(x);
  f.inv_f = Device<float>(T);
  f.hidden = Device<float>(Td);
  kernels::rmsnorm_forward<<<T, kBlock>>>(f.x_final.data, P + l.norm_f(), c.norm_eps, f.hidden.data,
                                          f.inv_f.data, d);
  f.logits = Device<float>(static_cast<size_t>(T) * V);
  gemm(handle, false, true, T, V, d, f.hidden.data, P + l.tok_emb(), f.logits.data, 0.0f);
  f.lse = Device<float>(T);
  f.logp = Device<float>(T);
  f.values = Device<float>(T);
  kernels::output_head<<<T, kBlock>>>(f.logits.data, b.targets.data, f.hidden.data, P + l.value_w(),
                                      P + l.value_b(), f.lse.data, f.logp.data, f.values.data, V, d);
  check_launch();
}

// rmsnorm backward: dgain += column sums, dx (= or +=) the row part.
void rmsnorm_backward(const Device<float>& x, const Device<float>& inv, const float* gain,
                      const Device<float>& dy, float* dgain, Device<float>& dx, int T, int d,
                      bool accumulate) {
  kernels::rmsnorm_gain_grad<<<blocks(d), kBlock>>>(x.data, inv.data, dy.data, dgain, T, d);
  kernels::rmsnorm_backward<<<T, kBlock>>>(x.data, inv.data, gain, dy.data, dx.data, d, accumulate ? 1 : 0);
  check_launch();
}

std::vector<float> run_backward(const Handle& handle, const LmModel& model, const DeviceBatch& b,
                                const DeviceForward& f, std::span<const float> dlogp,
                                std::span<const float> dvalue) {
  const LmConfig& c = model.config();
  const ParamLayout& l = model.layout();
  const int T = b.T, d = c.d_model, H = c.heads, ff = c.d_ff, V = c.vocab;
  const size_t Td = static_cast<size_t>(T) * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
  const float* P = f.params.data;
  Device<float> grad(static_cast<size_t>(l.size()));
  grad.zero();
  float* G = grad.data;
  Device<float> dl(dlogp.data(), dlogp.size()), dv(dvalue.data(), dvalue.size());

  // Head: dlogits = dlogp (onehot - softmax); logits = h E^T; value = h . w + b.
  Device<float> dlogits(static_cast<size_t>(T) * V);
  kernels::logits_grad<<<T, kBlock>>>(f.logits.data, f.lse.data, b.targets.data, dl.data, dlogits.data, V);
  check_launch();
  gemm(handle, true, false, V, d, T, dlogits.data, f.hidden.data, G + l.tok_emb(), 1.0f);  // += dlogits^T h
  Device<float> dh(Td);
  gemm(handle, false, false, T, d, V, dlogits.data, P + l.tok_emb(), dh.data, 0.0f);  // dlogits E
  kernels::value_grad<<<blocks(d + 1), kBlock>>>(f.hidden.data, dv.data, G + l.value_w(), G + l.value_b(), T,
                                                 d);
  if (c.value_grad_to_trunk) {
    kernels::value_into_trunk<<<blocks(static_cast<int64_t>(Td)), kBlock>>>(P + l.value_w(), dv.data, dh.data,
                                                                            T, d);
  }
  check_launch();
  Device<float> dx(Td);
  rmsnorm_backward(f.x_final, f.inv_f, P + l.norm_f(), dh, G + l.norm_f(), dx, T, d, false);

  Device<float> du(static_cast<size_t>(T) * ff), dm(Td), dattn(Td), dqkv(Td * 3), da(Td);
  Device<float> ds(static_cast<size_t>(b.prob_size));
  for (int k = c.layers - 1; k >= 0; --k) {
    const BlockLayout bl = l.block(k);
    const DeviceLayer& L = f.layers[k];
    // MLP: x_out = x_mid + GELU(m W1) W2.
    gemm(handle, true, false, ff, d, T, L.g.data, dx.data, G + bl.w2, 1.0f);  // dW2 += g^T dx
    gemm(handle, false, true, T, ff, d, dx.data, P + bl.w2, du.data, 0.0f);   // du = dx W2^T
    kernels::gelu_backward<<<blocks(int64_t{T} * ff), kBlock>>>(L.u.data, du.data, int64_t{T} * ff);
    check_launch();
    gemm(handle, true, false, d, ff, T, L.m.data, du.data, G + bl.w1, 1.0f);            // dW1 += m^T du
    gemm(handle, false, true, T, d, ff, du.data, P + bl.w1, dm.data, 0.0f);             // dm = du W1^T
    rmsnorm_backward(L.x_mid, L.inv2, P + bl.norm2, dm, G + bl.norm2, dx, T, d, true);  // dx = dL/dx_mid
    // Attention: x_mid = x_in + attn Wo.
    gemm(handle, true, false, d, d, T, L.attn.data, dx.data, G + bl.wo, 1.0f);  // dWo += attn^T dx
    gemm(handle, false, true, T, d, d, dx.data, P + bl.wo, dattn.data, 0.0f);   // dattn = dx Wo^T
    kernels::attention_backward_query<<<dim3(T, H), kBlock>>>(L.qkv.data, b.index(), L.probs.data, dattn.data,
                                                              ds.data, dqkv.data, d, H, scale);
    kernels::attention_backward_key<<<dim3(T, H), kBlock>>>(L.qkv.data, b.index(), L.probs.data, ds.data,
                                                            dattn.data, dqkv.data, d, H);
    check_launch();
    f.rope.rotate(dqkv.data, b.pos.data, T, d, H, true);  // back through the rotation: its transpose
    gemm(handle, true, false, d, 3 * d, T, L.a.data, dqkv.data, G + bl.wqkv, 1.0f);  // dWqkv += a^T dqkv
    gemm(handle, false, true, T, d, 3 * d, dqkv.data, P + bl.wqkv, da.data, 0.0f);   // da = dqkv Wqkv^T
    rmsnorm_backward(L.x_in, L.inv1, P + bl.norm1, da, G + bl.norm1, dx, T, d, true);
  }
  kernels::embed_grad<<<blocks(d), kBlock>>>(dx.data, b.tokens.data, b.pos.data, G + l.tok_emb(),
                                             c.rope ? nullptr : G + l.pos_emb(), T, d);
  check_launch();
  std::vector<float> out(static_cast<size_t>(l.size()));
  grad.to_host(out.data(), out.size());
  return out;
}

// Called after the input checks (the CPU's own, so bad input reads the same with or without a device).
void check_device() {
  std::string why;
  if (!lm_cuda_available(&why)) throw Error("policy \"lm\"", "backend", "no CUDA device: " + why);
}

// The device decoder of cuda_sample (sampler.h TokenDecoder): the parameters and every slot's KV cache stay
// on the device; a round's rows go through the network together (their GEMMs are one product of `rows`
// rows), and only the logits come back for the host's choice of token.
class CudaDecoder final : public TokenDecoder {
 public:
  CudaDecoder(const LmModel& model, int slots) : model_(model), lengths_(static_cast<size_t>(slots), 0) {
    const LmConfig& c = model.config();
    const size_t S = static_cast<size_t>(slots), d = static_cast<size_t>(c.d_model);
    params_ = Device<float>(model.parameters().data(), model.parameters().size());
    rope_ = DeviceRope(model);
    for (int k = 0; k < c.layers; ++k) {
      keys_.emplace_back(S * c.max_positions * d);
      values_.emplace_back(S * c.max_positions * d);
    }
    slot_ = Device<int>(S);
    token_ = Device<int>(S);
    pos_ = Device<int>(S);
    x_ = Device<float>(S * d);
    a_ = Device<float>(S * d);
    inv_ = Device<float>(S);
    qkv_ = Device<float>(S * 3 * d);
    scores_ = Device<float>(S * c.heads * c.max_positions);
    attn_ = Device<float>(S * d);
    u_ = Device<float>(S * c.d_ff);
    g_ = Device<float>(S * c.d_ff);
    logits_ = Device<float>(S * c.vocab);
  }

  void push(std::span<const int> slots, std::span<const int32_t> tokens,
            std::vector<RowVector>& logits) override {
    const int B = static_cast<int>(slots.size());
    if (B == 0) return;
    const LmConfig& c = model_.config();
    const ParamLayout& l = model_.layout();
    const int d = c.d_model, H = c.heads, ff = c.d_ff, V = c.vocab, M = c.max_positions;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim()));
    std::vector<int> pos(static_cast<size_t>(B));
    for (int i = 0; i < B; ++i) pos[i] = lengths_[static_cast<size_t>(slots[i])];
    slot_.from_host(slots.data(), slots.size());
    token_.from_host(tokens.data(), tokens.size());
    pos_.from_host(pos.data(), pos.size());
    const float* P = params_.data;
    kernels::embed<<<blocks(int64_t{B} * d), kBlock>>>(P + l.tok_emb(), c.rope ? nullptr : P + l.pos_emb(),
                                                       token_.data, pos_.data, x_.data, B, d);
    check_launch();
    for (int k = 0; k < c.layers; ++k) {
      const BlockLayout bl = l.block(k);
      kernels::rmsnorm_forward<<<B, kBlock>>>(x_.data, P + bl.norm1, c.norm_eps, a_.data, inv_.data, d);
      gemm(handle_, false, false, B, 3 * d, d, a_.data, P + bl.wqkv, qkv_.data, 0.0f);
      rope_.rotate(qkv_.data, pos_.data, B, d, H, false);  // before the cache keeps the keys
      kernels::kv_store<<<blocks(int64_t{B} * d), kBlock>>>(qkv_.data, slot_.data, pos_.data, keys_[k].data,
                                                            values_[k].data, B, d, M);
      kernels::decode_attention<<<dim3(B, H), kBlock>>>(qkv_.data, keys_[k].data, values_[k].data, slot_.data,
                                                        pos_.data, scores_.data, attn_.data, d, H, M, scale);
      check_launch();
      gemm(handle_, false, false, B, d, d, attn_.data, P + bl.wo, x_.data, 1.0f);  // x += attn wo
      kernels::rmsnorm_forward<<<B, kBlock>>>(x_.data, P + bl.norm2, c.norm_eps, a_.data, inv_.data, d);
      gemm(handle_, false, false, B, ff, d, a_.data, P + bl.w1, u_.data, 0.0f);
      kernels::gelu_forward<<<blocks(int64_t{B} * ff), kBlock>>>(u_.data, g_.data, int64_t{B} * ff);
      check_launch();
      gemm(handle_, false, false, B, d, ff, g_.data, P + bl.w2, x_.data, 1.0f);  // x += gelu(u) w2
    }
    kernels::rmsnorm_forward<<<B, kBlock>>>(x_.data, P + l.norm_f(), c.norm_eps, a_.data, inv_.data, d);
    gemm(handle_, false, true, B, V, d, a_.data, P + l.tok_emb(), logits_.data, 0.0f);  // tied output
    check_launch();
    host_.resize(static_cast<size_t>(B) * V);
    logits_.to_host(host_.data(), host_.size());
    for (int i = 0; i < B; ++i) {
      RowVector& row = logits[static_cast<size_t>(slots[i])];
      row.resize(V);
      std::copy(host_.begin() + static_cast<int64_t>(i) * V, host_.begin() + static_cast<int64_t>(i + 1) * V,
                row.data());
      ++lengths_[static_cast<size_t>(slots[i])];
    }
  }

  int length(int slot) const override { return lengths_[static_cast<size_t>(slot)]; }

 private:
  const LmModel& model_;
  const Handle handle_;
  std::vector<int> lengths_;
  Device<float> params_;
  DeviceRope rope_;
  std::vector<Device<float>> keys_, values_;  // per layer: slots x max_positions x d
  Device<int> slot_, token_, pos_;
  Device<float> x_, a_, inv_, qkv_, scores_, attn_, u_, g_, logits_;
  std::vector<float> host_;
};

}  // namespace

bool lm_cuda_available(std::string* why) {
  return crl::cuda::cuda_device_available(why);
}

ForwardResult cuda_forward(const LmModel& model, const PackedBatch& batch) {
  cuda_detail::check_batch_like_cpu(model, batch);
  check_device();
  const int T = batch.size(), d = model.config().d_model, V = model.config().vocab;
  ForwardResult r;
  r.x_final.resize(T, d);
  r.inv_f.resize(T);
  r.hidden.resize(T, d);
  r.logits.resize(T, V);
  r.lse.resize(T);
  r.logp.resize(T);
  r.values.resize(T);
  if (T == 0) return r;
  const Handle handle;
  const DeviceBatch b(batch, model.config().heads);
  DeviceForward f;
  f.params = Device<float>(model.parameters().data(), model.parameters().size());
  f.rope = DeviceRope(model);
  run_forward(handle, model, b, f);
  f.x_final.to_host(r.x_final.data(), static_cast<size_t>(r.x_final.size()));
  f.inv_f.to_host(r.inv_f.data(), r.inv_f.size());
  f.hidden.to_host(r.hidden.data(), static_cast<size_t>(r.hidden.size()));
  f.logits.to_host(r.logits.data(), static_cast<size_t>(r.logits.size()));
  f.lse.to_host(r.lse.data(), r.lse.size());
  f.logp.to_host(r.logp.data(), r.logp.size());
  f.values.to_host(r.values.data(), r.values.size());
  return r;
}

std::vector<float> cuda_backward(const LmModel& model, const PackedBatch& batch, std::span<const float> dlogp,
                                 std::span<const float> dvalue) {
  cuda_detail::check_batch_like_cpu(model, batch);
  check_backward_sizes(batch, dlogp, dvalue);
  const int T = batch.size();
  check_device();
  if (T == 0) return std::vector<float>(static_cast<size_t>(model.size()), 0.0f);
  const Handle handle;
  const DeviceBatch b(batch, model.config().heads);
  DeviceForward f;
  f.params = Device<float>(model.parameters().data(), model.parameters().size());
  f.rope = DeviceRope(model);
  run_forward(handle, model, b, f);
  return run_backward(handle, model, b, f, dlogp, dvalue);
}

std::unique_ptr<TokenDecoder> cuda_decoder(const LmModel& model, int slots) {
  cuda_detail::check_decoder_slots(slots);
  check_device();
  return std::make_unique<CudaDecoder>(model, slots);
}

std::vector<SampleResult> cuda_sample(const LmModel& model, std::span<const SampleRequest> requests,
                                      const SamplingParams& params, const SampleObserver& observer) {
  cuda_detail::check_sample_like_cpu(model, requests, params);
  check_device();
  if (requests.empty()) return {};
  CudaDecoder decoder(model, static_cast<int>(requests.size()));
  return sample_with(decoder, model.config(), requests, params, observer);
}

}  // namespace crl::lm
