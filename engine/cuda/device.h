#pragma once
// What the engine's CUDA code needs to know about the device. Compiled into the engine only when the CUDA
// back-ends are built (CRL_HAVE_CUDA); callers check cuda_device_available() and skip with a message
// otherwise, so the same binaries run on machines without a GPU.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/rng.h"

namespace crl::cuda {

// True when a CUDA device can be used; otherwise `why` says what is missing.
bool cuda_device_available(std::string* why = nullptr);

// The GPU twin of Rng::block(): blocks [0, count) of the stream `key`, computed by a kernel (one thread per
// block). Used to prove the device generates exactly the CPU's numbers. Throws crl::Error on a CUDA error.
std::vector<PhiloxCounter> philox_blocks(const StreamKey& key, uint64_t count);

}  // namespace crl::cuda
