# CUDA kernels (SURROGATE_HAVE_CUDA): added to surrogate::kernels. sm_90 SASS plus compute_90 PTX by
# default (CMAKE_CUDA_ARCHITECTURES, set in the top-level CMakeLists.txt). Only the CUDA runtime is
# linked, never the driver library (toolchain.md G4): binaries start on machines without a GPU.
#
# Every .cu file is compiled twice: by nvcc for the GPU, and by the host compiler into the host backend
# (device "cuda-emulated", namespace cuda::host; share/docs/cuda.md, "The host backend"), through a
# generated one-line .cpp that includes it with cuda/host/emulation.hpp forced in first.
set(SURROGATE_CUDA_KERNEL_SOURCES
  norm.cu mlp.cu mlp_tensor_cores.cu dense_tensor_cores.cu latent_encode.cu latent_decode.cu caller_io.cu ball_attention.cu
  point_layers.cu bsa_gate.cu sphere_attention.cu sphere_grid_ops.cu sphere_grid_norm.cu sphere_sht.cu
  bucket_attention.cu lsh_keys.cu hept_plan.cu nearest.cu ball_tree.cu ball_geometry.cu voxel_hierarchy.cu
  tree_attention.cu tree_layers.cu)
list(TRANSFORM SURROGATE_CUDA_KERNEL_SOURCES PREPEND cuda/ OUTPUT_VARIABLE gpu_sources)
set(host_sources)
foreach(source IN LISTS SURROGATE_CUDA_KERNEL_SOURCES)
  get_filename_component(stem ${source} NAME_WE)
  set(wrapper ${CMAKE_CURRENT_BINARY_DIR}/cuda_host_backend/${stem}.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "#include \"${source}\"  // the host backend's copy\n" @ONLY)
  list(APPEND host_sources ${wrapper})
endforeach()
# -mfma on x86-64: the kernels' fmaf calls become instructions instead of libm calls (half the host
# backend's time otherwise); the runtime refuses the emulated device on a CPU without FMA.
set(host_options -include ${CMAKE_CURRENT_SOURCE_DIR}/cuda/host/emulation.hpp -ffp-contract=off -Wno-unknown-pragmas)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  list(APPEND host_options -mfma)
endif()
set_source_files_properties(${host_sources} PROPERTIES COMPILE_OPTIONS "${host_options}"
  INCLUDE_DIRECTORIES "${CMAKE_CURRENT_SOURCE_DIR}/cuda")

target_sources(surrogate_kernels PRIVATE
  cuda/runtime.cpp
  cuda/host/emulator.cpp
  cuda/host/emulator_threads.cpp
  cuda/host/checks.cpp
  ${gpu_sources}
  ${host_sources})
target_include_directories(surrogate_kernels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/cuda)
target_link_libraries(surrogate_kernels PRIVATE CUDA::cudart)
# The public header surrogate/kernels/cuda.hpp includes cuda_runtime_api.h: targets that include it
# link CUDA::cudart themselves.
# Warnings for the device and host parts of the .cu files (the CXX warning set of surrogate_warnings
# does not reach nvcc). -Wno-psabi of the CPU kernels is a host-compiler flag: forwarded by nvcc.
target_compile_options(surrogate_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow --Wreorder -Werror=cross-execution-space-call>)
set_target_properties(surrogate_kernels PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
