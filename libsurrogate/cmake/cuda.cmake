# The CUDA forward of FLARE (SURROGATE_HAVE_CUDA), replacing flare_device_stub.cpp. Host code only (the
# kernels are in surrogate::kernels); links the CUDA runtime, never the driver library (toolchain.md G4).
target_sources(surrogate_core PRIVATE src/flare/flare_cuda.cpp)
# The CUDA forward of AttentionS2 / NeighborhoodAttentionS2 (surrogate/sphere/attention_device.hpp).
target_sources(surrogate_core PRIVATE src/sphere/attention_device.cpp)
# The CUDA forward of DiscoConvS2 / ResampleS2 (surrogate/sphere/grid_ops_device.hpp).
target_sources(surrogate_core PRIVATE src/sphere/grid_ops_device.cpp)
# The CUDA forward of the SphericalTransformer (transformer_device.hpp), replacing transformer_device_stub.cpp.
target_sources(surrogate_core PRIVATE src/sphere/transformer_device.cpp)
# The single-layer s2_attention / s2_neighborhood_attention models on a device (layer_device.hpp),
# replacing layer_device_stub.cpp.
target_sources(surrogate_core PRIVATE src/sphere/layer_device.cpp)
# The CUDA forward of Erwin (erwin_device.hpp), replacing erwin_device_stub.cpp.
target_sources(surrogate_core PRIVATE src/erwin/erwin_cuda.cpp src/erwin/erwin_cuda_geometry.cpp
                                      src/erwin/erwin_cuda_layout.cpp)
# ExchangePlan applied to device rows through host memory (the multi-rank device forwards).
target_sources(surrogate_core PRIVATE src/balltree/device_exchange.cpp)
# The CUDA forward of BSA (bsa_device.hpp), replacing bsa_device_stub.cpp.
target_sources(surrogate_core PRIVATE src/bsa/bsa_cuda.cpp src/bsa/bsa_cuda_distributed.cpp)
target_link_libraries(surrogate_core PRIVATE CUDA::cudart)
