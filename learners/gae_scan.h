#pragma once
// GAE as an associative scan, shared by the CUDA kernels and their CPU test.
//
// Why a scan: the recurrence A_i = delta_i + gamma lambda A_{i+1} runs backwards along each segment, so one
// thread per rollout (the obvious GPU port) leaves most of the device idle when rollouts are long. Written as
// an affine map on a small state, the recurrence composes associatively, so any split of the token axis into
// chunks and threads gives the same result (up to rounding), and segment boundaries need no special casing.
//
// State after processing positions i..end, read at position i:
//   A = A_loc at the next sampled position at or after i,
//   w = the value V at that position (what delta of an earlier sampled token bootstraps from),
//   c = the stitched-target correction at that position (0 unless the stitched critic target is on).
// Each token maps the state of position i+1 to that of position i:
//   unsampled token:          identity (skipped, not zero-filled);
//   sampled, not the last:    A = gamma lambda A' + gamma w' - v,  w = v,  c = gamma lambda c';
//   last sampled of segment:  A = R - v,  w = v,  c = c0   (bootstrap 0: nothing flows in from the next
//                             segment, which is what makes the scan segmented without keys).
// The maps are s -> M s + b with M = [[m00, m01, 0], [0, m11, 0], [0, 0, m00]]: 6 numbers per element.
#include "engine/rng.h"  // CRL_HOST_DEVICE

namespace crl::learners {

template <typename T>
struct GaeMap {
  T m00, m01, m11, b0, b1, b2;
};

template <typename T>
struct GaeState {
  T a, w, c;
};

template <typename T>
CRL_HOST_DEVICE inline GaeMap<T> gae_identity() {
  return GaeMap<T>{T(1), T(0), T(1), T(0), T(0), T(0)};
}

// The map of one token (see above). `gl` = gamma * lambda_s, `c0` = the stitched correction at the
// segment's last sampled token (gamma V_boot - R, or 0).
template <typename T>
CRL_HOST_DEVICE inline GaeMap<T> gae_token_map(bool sampled, bool last, T v, T gamma, T gl, T reward, T c0) {
  if (!sampled) return gae_identity<T>();
  if (last) return GaeMap<T>{T(0), T(0), T(0), reward - v, v, c0};
  return GaeMap<T>{gl, gamma, T(0), -v, v, T(0)};
}

// (f o g)(s) = f(g(s)): apply g first (the later positions), then f.
template <typename T>
CRL_HOST_DEVICE inline GaeMap<T> gae_compose(const GaeMap<T>& f, const GaeMap<T>& g) {
  return GaeMap<T>{f.m00 * g.m00,       f.m00 * g.m01 + f.m01 * g.m11,
                   f.m11 * g.m11,       f.m00 * g.b0 + f.m01 * g.b1 + f.b0,
                   f.m11 * g.b1 + f.b1, f.m00 * g.b2 + f.b2};
}

template <typename T>
CRL_HOST_DEVICE inline GaeState<T> gae_apply(const GaeMap<T>& f, const GaeState<T>& s) {
  return GaeState<T>{f.m00 * s.a + f.m01 * s.w + f.b0, f.m11 * s.w + f.b1, f.m00 * s.c + f.b2};
}

}  // namespace crl::learners
