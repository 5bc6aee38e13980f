# Every dependency comes from Debian's packages, or from the CUDA toolkit in /usr/local/cuda.
# Required: MPI, parallel HDF5, OpenBLAS, OpenMP. Optional (detected): CUDA + cuBLAS + NCCL, PETSc, VTK.
# Tests and benchmarks: GoogleTest, Google Benchmark.

# --- MPI --------------------------------------------------------------------------------------------
find_package(MPI REQUIRED COMPONENTS C CXX)
if(CMAKE_Fortran_COMPILER)
  find_package(MPI COMPONENTS Fortran)
endif()
# Keep Open MPI's deprecated C++ bindings out, whatever the include order (toolchain.md G7).
add_compile_definitions(OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)

# --- OpenMP, BLAS -----------------------------------------------------------------------------------
find_package(OpenMP REQUIRED COMPONENTS CXX)
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(SURROGATE_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas REQUIRED)

# --- HDF5, parallel flavour (toolchain.md G6: without this FindHDF5 picks the serial library) -------
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "surrogate needs the parallel (MPI) HDF5 library: apt-get install libhdf5-openmpi-dev")
endif()

# --- Python with torch and h5py, for the exporter and its tests (not needed at run time) -----------
set(SURROGATE_PYTHON "" CACHE FILEPATH "Python interpreter with torch and h5py (exporter tests)")
if(NOT SURROGATE_PYTHON)
  foreach(_candidate /usr/bin/python3 python3)
    find_program(_py NAMES ${_candidate} NO_CACHE)
    if(_py)
      execute_process(COMMAND ${_py} -c "import torch, h5py, numpy, yaml"
                      RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(_rc EQUAL 0)
        set(SURROGATE_PYTHON ${_py} CACHE FILEPATH "Python interpreter with torch and h5py" FORCE)
        break()
      endif()
    endif()
    unset(_py)
  endforeach()
endif()

# --- CUDA, cuBLAS, NCCL (optional) ------------------------------------------------------------------
set(SURROGATE_HAVE_CUDA OFF)
set(SURROGATE_HAVE_NCCL OFF)
if(NOT SURROGATE_ENABLE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    # CMake 3.25.1 lacks nvcc's C++20 flag (added in 3.25.2): back-port the table entry (toolchain.md G2).
    if(CMAKE_VERSION VERSION_LESS 3.25.2 AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
       AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)   # one (shared) CUDA runtime per process (toolchain.md G5)
    find_package(CUDAToolkit REQUIRED)
    find_package(NCCL)
    set(SURROGATE_HAVE_CUDA ON)
    if(NCCL_FOUND)
      set(SURROGATE_HAVE_NCCL ON)
    endif()
  elseif(SURROGATE_ENABLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SURROGATE_ENABLE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()

# --- PETSc (optional) -------------------------------------------------------------------------------
set(SURROGATE_HAVE_PETSC OFF)
if(NOT SURROGATE_ENABLE_PETSC STREQUAL "OFF")
  find_package(PkgConfig)
  if(PkgConfig_FOUND)
    if(DEFINED ENV{PETSC_DIR})
      list(PREPEND CMAKE_PREFIX_PATH "$ENV{PETSC_DIR}/$ENV{PETSC_ARCH}" "$ENV{PETSC_DIR}")
    endif()
    list(APPEND CMAKE_PREFIX_PATH /usr/lib/petsc)
    pkg_check_modules(PETSC IMPORTED_TARGET petsc>=3.18)
    if(PETSC_FOUND)
      set(SURROGATE_HAVE_PETSC ON)
    endif()
  endif()
  if(NOT SURROGATE_HAVE_PETSC AND SURROGATE_ENABLE_PETSC STREQUAL "ON")
    message(FATAL_ERROR "SURROGATE_ENABLE_PETSC=ON but PETSc was not found (apt-get install petsc-dev)")
  endif()
endif()

# --- VTK (optional) ---------------------------------------------------------------------------------
set(SURROGATE_HAVE_VTK OFF)
if(NOT SURROGATE_ENABLE_VTK STREQUAL "OFF")
  # Only the XML modules: VTK's HDF5-based modules would load the serial HDF5 next to ours (G6).
  find_package(VTK 9.1 QUIET COMPONENTS CommonCore CommonDataModel IOXML)
  if(VTK_FOUND)
    set(SURROGATE_HAVE_VTK ON)
  elseif(SURROGATE_ENABLE_VTK STREQUAL "ON")
    message(FATAL_ERROR "SURROGATE_ENABLE_VTK=ON but VTK 9 was not found (apt-get install libvtk9-dev)")
  endif()
endif()

# --- Test and benchmark frameworks ------------------------------------------------------------------
if(SURROGATE_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)
endif()
if(SURROGATE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
