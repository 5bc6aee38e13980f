// Builds without the CUDA backend: the SphericalTransformer device forward is refused with a clear error.
#include <string>

#include "surrogate/error.hpp"
#include "transformer_device.hpp"

namespace surrogate::sphere {

std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer&,
                                                                                      const ModelFile&, int device) {
  throw Error(ErrorCode::unsupported, "sphere_transformer: CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::sphere
