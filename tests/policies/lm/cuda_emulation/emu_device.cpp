// Emulation (see cuda_runtime.h): the emulated device is always there.
#include <string>

#include "engine/cuda/device.h"
namespace crl::cuda {
bool cuda_device_available(std::string*) {
  return true;
}
}  // namespace crl::cuda
