// Builds without the CUDA backend: the single-layer device forwards are refused with a clear error.
#include <string>

#include "layer_device.hpp"
#include "surrogate/error.hpp"

namespace surrogate::sphere {
namespace {
[[noreturn]] void refuse(const char* model, int device) {
  throw Error(ErrorCode::unsupported, std::string(model) + ": CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}
}  // namespace

std::unique_ptr<S2LayerDeviceForward> make_s2_attention_device_forward(const AttentionS2Config&,
                                                                       const AttentionS2Weights&, int device) {
  refuse("s2_attention", device);
}

std::unique_ptr<S2LayerDeviceForward> make_s2_neighborhood_attention_device_forward(
    const NeighborhoodAttentionS2Config&, const NeighborhoodAttentionS2Weights&, int device) {
  refuse("s2_neighborhood_attention", device);
}

}  // namespace surrogate::sphere
