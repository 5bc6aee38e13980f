# CUDA kernels (SURROGATE_HAVE_CUDA): added to surrogate::kernels. sm_90 SASS plus compute_90 PTX by
# default (CMAKE_CUDA_ARCHITECTURES, set in the top-level CMakeLists.txt). Only the CUDA runtime is
# linked, never the driver library (toolchain.md G4): binaries start on machines without a GPU.
target_sources(surrogate_kernels PRIVATE
  cuda/runtime.cpp
  cuda/norm.cu
  cuda/mlp.cu
  cuda/mlp_tensor_cores.cu
  cuda/latent_encode.cu
  cuda/latent_decode.cu
  cuda/caller_io.cu
  cuda/ball_attention.cu
  cuda/point_layers.cu
  cuda/bsa_gate.cu
  cuda/sphere_attention.cu
  cuda/sphere_grid_ops.cu
  cuda/sphere_grid_norm.cu
  cuda/sphere_sht.cu)
target_link_libraries(surrogate_kernels PRIVATE CUDA::cudart)
# The public header surrogate/kernels/cuda.hpp includes cuda_runtime_api.h: targets that include it
# link CUDA::cudart themselves.
# Warnings for the device and host parts of the .cu files (the CXX warning set of surrogate_warnings
# does not reach nvcc). -Wno-psabi of the CPU kernels is a host-compiler flag: forwarded by nvcc.
target_compile_options(surrogate_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow --Wreorder -Werror=cross-execution-space-call>)
set_target_properties(surrogate_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
