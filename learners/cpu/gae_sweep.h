#pragma once
// The reverse GAE sweep (learner.h steps 3-5), several segments at a time.
//
// Why lanes: within a segment the recurrence A_i = delta_i + gamma lambda A_{i+1} is a chain of dependent
// multiply-adds, so one segment at a time runs at the latency of that chain (about 7 cycles a token). The
// sweep advances kSweepLanes segments in lockstep, one per vector element, each with its own chain, so the
// chains overlap; the arithmetic of every token is exactly the serial one (same bits: tested against a
// serial sweep). A lane that finishes its segment takes the next one in order.
//
// For each token the lanes write their raw state in place, into the caller's output arrays:
//   a    (into the advantage array) = A_loc at the newest sampled position at or after the token,
//   corr (into the return array)    = the stitched-bootstrap correction there (stitched target only).
// Whenever every segment below some index has been swept, the sweep says so (segments are taken in order),
// and the caller turns those segments' raw state into advantages and returns, front to back, while the
// tokens are still in cache (sweep_kernel.h). That keeps the memory traffic of the whole learner step to one
// pass over the batch.
#include <algorithm>
#include <cstdint>

namespace crl::learners::cpu {

// Everything the token sweep of one segment needs, fixed before any token is visited.
struct SegmentSweep {
  double gamma = 1.0;
  double gl = 1.0;              // gamma * lambda_s
  double reward = 0.0;          // the rollout's shared reward, at the last sampled token
  double factor = 1.0;          // (gamma lambda_s)^N_after(s), or 1 without the correction
  double ret_scale = 1.0;       // factor for the corrected critic target, else 1
  double corr0 = 0.0;           // stitched target: gamma V(first sampled of s+1) - R, else 0
  bool zero_advantage = false;  // positive-only ablation: the rollout's reward is <= 0
};

constexpr int kSweepLanes = 4;

namespace {

// One element per lane (GCC/Clang vector extensions: the widest vectors the translation unit is compiled
// for, split into narrower ones where needed).
typedef double LaneVector __attribute__((vector_size(kSweepLanes * sizeof(double))));
typedef int64_t LaneMask __attribute__((vector_size(kSweepLanes * sizeof(int64_t))));

// The state carried backwards along one segment. `gnv` is gamma V at the newest sampled position seen, and
// starts at the reward: the first sampled token (from the end) then gets (R - V) + gl 0 = R - V, the
// bootstrap-0 rule, with no branch; later ones get (gamma V_next - V) + gl A, the serial expression.
struct LaneState {
  double a = 0.0;
  double gnv = 0.0;
  double corr = 0.0;     // stitched only
  bool started = false;  // stitched only: the last sampled token has been seen
};

// Prefetches the cache line at `base` + `offset` bytes. Computed as an integer: the address may lie outside
// the array (a prefetch never faults), where pointer arithmetic would be undefined.
inline void prefetch_address(const void* base, int64_t offset, bool for_write) {
  const void* address = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) + offset);
  if (for_write) {
    __builtin_prefetch(address, 1);
  } else {
    __builtin_prefetch(address, 0);
  }
}

// One token, branch-free (the same selects as the lockstep loop). Unsampled tokens leave the state as it is
// (skipped, not zero-filled).
template <bool kStitched>
inline void lane_token(const SegmentSweep& p, LaneState& st, double v, uint8_t sampled, double& a_out,
                       double& corr_out) {
  const bool m = sampled != 0;
  const double a = (st.gnv - v) + p.gl * st.a;
  st.a = m ? a : st.a;
  st.gnv = m ? p.gamma * v : st.gnv;
  a_out = st.a;
  if constexpr (kStitched) {
    const double corr = st.started ? st.corr * p.gl : p.corr0;
    st.corr = m ? corr : st.corr;
    st.started = st.started || m;
    corr_out = st.corr;
  }
}

// Sweeps every segment of [0, num_segments) once, writing the raw state of token t to a_out[t] (and
// corr_out[t] with the stitched target), and calling swept(s_end) each time the segments [0, s_end) have all
// been swept (s_end grows; the last call has s_end = num_segments). Deterministic: the lane schedule
// depends only on the segment lengths.
template <bool kStitched, class Swept>
void sweep_segments(const double* values, const uint8_t* critic, const int64_t* offsets, int64_t num_segments,
                    const SegmentSweep* plan, double* a_out, double* corr_out, Swept&& swept) {
  struct Lane {
    int64_t segment = -1;
    int64_t begin = 0;  // the segment's first token
    int64_t end = 0;    // one past the newest token not yet swept
    LaneState st;
  };
  Lane lanes[kSweepLanes];
  int64_t next = 0;
  auto refill = [&](Lane& lane) {
    while (next < num_segments && offsets[next] == offsets[next + 1]) ++next;  // empty: nothing to sweep
    if (next == num_segments) {
      lane.segment = -1;
      return;
    }
    lane.segment = next;
    lane.begin = offsets[next];
    lane.end = offsets[next + 1];
    lane.st = LaneState{};
    lane.st.gnv = plan[next].reward;
    ++next;
  };
  // Every segment below the lowest one a lane holds (or below `next` when none) is done.
  int64_t reported = 0;
  auto report = [&]() {
    int64_t done = next;
    for (const Lane& lane : lanes) {
      if (lane.segment >= 0) done = std::min(done, lane.segment);
    }
    if (done > reported) {
      reported = done;
      swept(done);
    }
  };
  for (Lane& lane : lanes) refill(lane);
  while (true) {
    int active = 0;
    int64_t common = INT64_MAX;
    for (const Lane& lane : lanes) {
      if (lane.segment < 0) continue;
      ++active;
      common = std::min(common, lane.end - lane.begin);
    }
    if (active < kSweepLanes) break;
    // All lanes busy: `common` tokens of each in lockstep, one lane per vector element (element-wise IEEE
    // arithmetic, so each lane computes exactly what lane_token computes).
    static_assert(kSweepLanes == 4, "the element lists below are written for four lanes");
    LaneVector a, gnv, corr, gl, gamma, corr0;
    LaneMask started;
    const double* v[kSweepLanes];
    const uint8_t* c[kSweepLanes];
    double* ao[kSweepLanes];
    double* co[kSweepLanes];
    for (int k = 0; k < kSweepLanes; ++k) {
      const Lane& lane = lanes[k];
      const SegmentSweep& p = plan[lane.segment];
      a[k] = lane.st.a;
      gnv[k] = lane.st.gnv;
      corr[k] = lane.st.corr;
      started[k] = lane.st.started ? -1 : 0;
      gl[k] = p.gl;
      gamma[k] = p.gamma;
      corr0[k] = p.corr0;
      // Step j visits token end - 1 - j of each lane.
      v[k] = values + lane.end - 1;
      c[k] = critic + lane.end - 1;
      ao[k] = a_out + lane.end - 1;
      co[k] = kStitched ? corr_out + lane.end - 1 : nullptr;
    }
    for (int64_t j = 0; j < common; ++j) {
      if ((j & 7) == 0) {
        for (int k = 0; k < kSweepLanes; ++k) {
          // 128 tokens ahead (the lanes walk backwards, which hardware prefetchers follow poorly); the output
          // lines are fetched for writing. Addresses only: they may lie before the arrays, never read.
          prefetch_address(v[k], -8 * (j + 128), false);
          prefetch_address(ao[k], -8 * (j + 128), true);
          if ((j & 63) == 0) prefetch_address(c[k], -(j + 128), false);
        }
      }
      const LaneVector x = {v[0][-j], v[1][-j], v[2][-j], v[3][-j]};
      const LaneMask m = LaneMask{c[0][-j], c[1][-j], c[2][-j], c[3][-j]} != 0;
      a = m ? (gnv - x) + gl * a : a;
      gnv = m ? gamma * x : gnv;
      for (int k = 0; k < kSweepLanes; ++k) ao[k][-j] = a[k];
      if constexpr (kStitched) {
        corr = m ? (started ? corr * gl : corr0) : corr;
        started = started | m;
        for (int k = 0; k < kSweepLanes; ++k) co[k][-j] = corr[k];
      }
    }
    bool refilled = false;
    for (int k = 0; k < kSweepLanes; ++k) {
      Lane& lane = lanes[k];
      lane.st.a = a[k];
      lane.st.gnv = gnv[k];
      lane.st.corr = corr[k];
      lane.st.started = started[k] != 0;
      lane.end -= common;
      if (lane.end == lane.begin) {
        refill(lane);
        refilled = true;
      }
    }
    if (refilled) report();
  }
  // The last segments (fewer than kSweepLanes left), one at a time, oldest first.
  std::sort(lanes, lanes + kSweepLanes, [](const Lane& x, const Lane& y) {
    return static_cast<uint64_t>(x.segment) < static_cast<uint64_t>(y.segment);
  });
  for (Lane& lane : lanes) {
    if (lane.segment < 0) continue;
    const SegmentSweep& p = plan[lane.segment];
    double ignored = 0.0;
    for (int64_t t = lane.end - 1; t >= lane.begin; --t) {
      lane_token<kStitched>(p, lane.st, values[t], critic[t], a_out[t], kStitched ? corr_out[t] : ignored);
    }
    lane.segment = -1;
    report();
  }
  if (reported < num_segments) swept(num_segments);
}

}  // namespace
}  // namespace crl::learners::cpu
