# CUDA builds (SURROGATE_HAVE_CUDA): device selection ("cuda", "cuda:N") instead of
# device_select_cpu.cpp, and with NCCL the NCCL communicator and device transport of the CUDA forward.
# Only the CUDA runtime (and NCCL) are linked, never the driver library (toolchain.md G4).
target_sources(surrogate_coupling PRIVATE src/device_select_cuda.cpp)
target_link_libraries(surrogate_coupling PRIVATE CUDA::cudart)
if(SURROGATE_HAVE_NCCL)
  target_sources(surrogate_coupling PRIVATE src/nccl_comm.cpp)
  target_link_libraries(surrogate_coupling PRIVATE NCCL::nccl)
  target_compile_definitions(surrogate_coupling PRIVATE SURROGATE_HAVE_NCCL=1)
endif()
