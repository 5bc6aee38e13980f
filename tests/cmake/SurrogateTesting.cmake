# One helper per kind of test (share/docs/adding-a-family.md, "Tests"). Every helper takes
#   name SOURCES <files> [LABELS <labels>] [LINK <targets>] [INTERNAL] [NO_FMA] [COUPLING]
# INTERNAL adds libsurrogate/src to the include path (tests of a family's private headers), NO_FMA compiles
# the sources with -ffp-contract=off (references that must round like the library), COUPLING links
# surrogate::coupling instead of surrogate::core. Every test binary sees SURROGATE_TEST_DATA_DIR.

set(SURROGATE_MPIEXEC ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
# Root in CI containers and more ranks than cores: allow both (toolchain.md G10).
set(SURROGATE_MPIEXEC_FLAGS --allow-run-as-root --oversubscribe)
# Passive OpenMP waits: tests that run 2+ threads per rank alternate short OpenMP regions with MPI
# collectives, and with more ranks than cores threads spinning at the end of a region starve the ranks
# that hold the data (test_sphere_mpi at 4 ranks: 58 s spinning, 3 s passive).
set(SURROGATE_TEST_ENV "OMP_NUM_THREADS=1" "OMPI_MCA_rmaps_base_oversubscribe=1" "OMP_WAIT_POLICY=passive")
set(SURROGATE_TESTS_DIR ${CMAKE_CURRENT_LIST_DIR}/..)

# Registers a GoogleTest binary's tests (discovered when ctest runs) with labels and SURROGATE_TEST_ENV.
# gtest_discover_tests(... PROPERTIES ...) writes list values unquoted into its PRE_TEST script, so
# LABELS "unit;cuda" or an ENVIRONMENT of several variables would be split into separate property names
# (only the first label and the first variable took effect). The properties are therefore set by a second
# file that ctest includes after the discovered tests, from the list of their names.
function(surrogate_discover_gtests target prefix labels)
  set(environment ${SURROGATE_TEST_ENV} ${ARGN})  # extra arguments: more NAME=VALUE for the environment
  string(MAKE_C_IDENTIFIER "${prefix}" tag)
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${prefix}" TEST_LIST ${target}_${tag}_TESTS)
  set(properties_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_${tag}_properties.cmake)
  file(GENERATE OUTPUT ${properties_file}
       CONTENT "foreach(test IN LISTS ${target}_${tag}_TESTS)
  set_tests_properties(\"\${test}\" PROPERTIES LABELS \"${labels}\" ENVIRONMENT \"${environment}\")
endforeach()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${properties_file})
endfunction()

# The schedules the device tests run under on the host backend: a block's threads in order, and a seeded
# shuffle between barriers (a race on shared memory changes the result under one of them).
set(SURROGATE_EMULATED_SCHEDULES forward shuffle:1)

# The executable every helper builds. T_* are the caller's parsed arguments.
macro(_surrogate_test_executable name extra_sources)
  add_executable(${name} ${T_SOURCES} ${extra_sources})
  if(T_COUPLING)
    target_link_libraries(${name} PRIVATE surrogate::coupling)
  else()
    target_link_libraries(${name} PRIVATE surrogate::core)
  endif()
  # MPI only for the include path where core alone is linked: the parallel HDF5 headers include mpi.h.
  target_link_libraries(${name} PRIVATE surrogate_test_support GTest::gtest HDF5::HDF5 MPI::MPI_C
                        OpenMP::OpenMP_CXX ${T_LINK} $<BUILD_INTERFACE:surrogate_warnings>)
  target_compile_definitions(${name} PRIVATE SURROGATE_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data")
  if(T_INTERNAL)
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/libsurrogate/src)
  endif()
  if(T_NO_FMA)
    target_compile_options(${name} PRIVATE -ffp-contract=off)
  endif()
endmacro()

set(_surrogate_test_flags INTERNAL NO_FMA COUPLING)
set(_surrogate_test_lists SOURCES LABELS LINK RANKS ARGS)

# A unit test binary: every GoogleTest case is a ctest, named PREFIX + Suite.Case (default prefix: none),
# labels LABELS (default unit).
function(surrogate_add_gtest name)
  cmake_parse_arguments(T "${_surrogate_test_flags}" "PREFIX" "${_surrogate_test_lists}" ${ARGN})
  if(NOT T_SOURCES)
    set(T_SOURCES ${T_UNPARSED_ARGUMENTS})  # surrogate_add_gtest(name a.cpp b.cpp)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  _surrogate_test_executable(${name} "")
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  surrogate_discover_gtests(${name} "${T_PREFIX}" "${T_LABELS}")
endfunction()

# A unit test binary run as one ctest named NAME (default <labels[0]>.<name>), for binaries whose cases
# share expensive set-up or must run in one process.
function(surrogate_add_test_binary name)
  cmake_parse_arguments(T "${_surrogate_test_flags}" "TEST_NAME" "${_surrogate_test_lists}" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TEST_NAME)
    list(GET T_LABELS 0 first_label)
    set(T_TEST_NAME ${first_label}.${name})
  endif()
  _surrogate_test_executable(${name} "")
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  add_test(NAME ${T_TEST_NAME} COMMAND ${name} ${T_ARGS})
  set_tests_properties(${T_TEST_NAME} PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "${SURROGATE_TEST_ENV}")
endfunction()

# An MPI test binary: one ctest mpi.<name>.np<N> per rank count in RANKS (default 1 2 3 4), each run under
# mpirun and compared against the single-rank result inside; labels mpi + LABELS.
function(surrogate_add_mpi_test name)
  cmake_parse_arguments(T "${_surrogate_test_flags}" "TIMEOUT;PREFIX" "${_surrogate_test_lists}" ${ARGN})
  if(NOT T_SOURCES)
    set(T_SOURCES ${T_UNPARSED_ARGUMENTS})
  endif()
  if(NOT T_RANKS)
    set(T_RANKS 1 2 3 4)
  endif()
  if(NOT T_PREFIX)
    set(T_PREFIX mpi)
  endif()
  set(T_COUPLING ON)
  _surrogate_test_executable(${name} ${SURROGATE_TESTS_DIR}/support/mpi_gtest_main.cpp)
  target_link_libraries(${name} PRIVATE MPI::MPI_CXX)
  set(labels mpi ${T_LABELS})
  foreach(np ${T_RANKS})
    set(test ${T_PREFIX}.${name}.np${np})
    add_test(NAME ${test} COMMAND ${SURROGATE_MPIEXEC} ${np} ${SURROGATE_MPIEXEC_FLAGS} $<TARGET_FILE:${name}> ${T_ARGS})
    set_tests_properties(${test} PROPERTIES PROCESSORS ${np} LABELS "${labels}" ENVIRONMENT "${SURROGATE_TEST_ENV}")
    if(T_TIMEOUT)
      set_tests_properties(${test} PROPERTIES TIMEOUT ${T_TIMEOUT})
    endif()
  endforeach()
endfunction()

# A device test binary (CUDA builds only; tests/support/gpu_test.hpp), one source for two backends:
#  - the host backend (device "cuda-emulated"), always run: cases cuda.<schedule>.Suite.Case, labels
#    unit;cuda + LABELS, once per schedule of SURROGATE_EMULATED_SCHEDULES (ONE_SCHEDULE: the last only);
#  - a real GPU: cases gpu.Suite.Case, label gpu + LABELS, every case SKIPPED without a device.
# Cases that need the host backend's hooks (suites *HostBackend, SURROGATE_HOST_BACKEND_ONLY) skip on a GPU.
function(surrogate_add_gpu_test name)
  if(NOT SURROGATE_HAVE_CUDA)
    return()
  endif()
  cmake_parse_arguments(T "${_surrogate_test_flags};ONE_SCHEDULE" "" "${_surrogate_test_lists}" ${ARGN})
  set(T_COUPLING ON)
  _surrogate_test_executable(${name} "")
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda)  # host/emulator.hpp: hooks
  target_link_libraries(${name} PRIVATE GTest::gtest_main CUDA::cudart)
  surrogate_discover_gtests(${name} "gpu." "gpu;${T_LABELS}")
  set(schedules ${SURROGATE_EMULATED_SCHEDULES})
  if(T_ONE_SCHEDULE)  # whole forwards, whose kernels the kernel tests run under every schedule: the last
    list(GET SURROGATE_EMULATED_SCHEDULES -1 schedules)
  endif()
  foreach(schedule IN LISTS schedules)
    string(REGEX REPLACE ":.*" "" short ${schedule})
    surrogate_discover_gtests(${name} "cuda.${short}." "unit;cuda;${T_LABELS}" SURROGATE_TEST_DEVICE=cuda-emulated
                              SURROGATE_CUDA_EMULATED_SCHEDULE=${schedule})
  endforeach()
endfunction()

# The same under mpirun, one ctest gpu.mpi.<name>.np<N> per rank count (ranks share the GPUs: node-local
# rank modulo the device count), reported as skipped when the output says so, and cuda.mpi.<name>.np<N> on
# the host backend (GPU_ONLY: not there; e.g. NCCL). FILTER: a gtest filter. The GPU runs leave out the
# suites *HostBackend (cases that need the host backend's hooks).
function(surrogate_add_gpu_mpi_test name)
  if(NOT SURROGATE_HAVE_CUDA)
    return()
  endif()
  cmake_parse_arguments(T "${_surrogate_test_flags};GPU_ONLY" "FILTER" "${_surrogate_test_lists}" ${ARGN})
  set(filter_args "")
  if(T_FILTER MATCHES "-")  # negative patterns already: one more
    set(filter_args "--gtest_filter=${T_FILTER}")
    set(gpu_filter "${T_FILTER}:*HostBackend.*")
  elseif(T_FILTER)
    set(filter_args "--gtest_filter=${T_FILTER}")
    set(gpu_filter "${T_FILTER}-*HostBackend.*")
  else()
    set(gpu_filter "*-*HostBackend.*")
  endif()
  set(T_COUPLING ON)
  _surrogate_test_executable(${name} ${SURROGATE_TESTS_DIR}/support/mpi_gtest_main.cpp)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda)  # host/emulator.hpp: hooks
  target_link_libraries(${name} PRIVATE MPI::MPI_CXX CUDA::cudart)
  set(labels gpu mpi ${T_LABELS})
  foreach(np ${T_RANKS})
    add_test(NAME gpu.mpi.${name}.np${np}
             COMMAND ${SURROGATE_MPIEXEC} ${np} ${SURROGATE_MPIEXEC_FLAGS} $<TARGET_FILE:${name}>
                     "--gtest_filter=${gpu_filter}")
    set_tests_properties(gpu.mpi.${name}.np${np} PROPERTIES PROCESSORS ${np} LABELS "${labels}"
                         ENVIRONMENT "${SURROGATE_TEST_ENV}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
    # The host backend (the first schedule; the single-process tests cover the others), unless GPU_ONLY.
    # TIMEOUT: a rank left waiting in a collective fails instead of hanging CI.
    if(T_GPU_ONLY)
      continue()
    endif()
    list(GET SURROGATE_EMULATED_SCHEDULES 0 schedule)
    add_test(NAME cuda.mpi.${name}.np${np}
             COMMAND ${SURROGATE_MPIEXEC} ${np} ${SURROGATE_MPIEXEC_FLAGS} $<TARGET_FILE:${name}> ${filter_args})
    set_tests_properties(cuda.mpi.${name}.np${np} PROPERTIES PROCESSORS ${np} LABELS "unit;cuda;mpi;${T_LABELS}"
                         ENVIRONMENT "${SURROGATE_TEST_ENV};SURROGATE_TEST_DEVICE=cuda-emulated;SURROGATE_CUDA_EMULATED_SCHEDULE=${schedule}"
                         TIMEOUT 300 FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endforeach()
endfunction()

# Device code (kernels/cuda/*.cuh) compiled by the host compiler with the host emulation of the CUDA
# constructs it uses (tests/device/cuda_host_emulation.hpp), against CPU references: cases named
# cuda.Suite.Case, labels unit;cuda + LABELS; CUDA builds only; run, and must pass, without a GPU.
function(surrogate_add_kernel_emulation_test name)
  if(NOT SURROGATE_HAVE_CUDA)
    return()
  endif()
  cmake_parse_arguments(T "${_surrogate_test_flags}" "" "${_surrogate_test_lists}" ${ARGN})
  set(T_NO_FMA ON)
  _surrogate_test_executable(${name} "")
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda ${SURROGATE_TESTS_DIR}/device)
  target_compile_options(${name} PRIVATE -Wno-unknown-pragmas)
  target_link_libraries(${name} PRIVATE GTest::gtest_main CUDA::cudart)
  set(labels unit cuda ${T_LABELS})
  surrogate_discover_gtests(${name} "cuda." "${labels}")
endfunction()

# A device test under mpirun that only the host backend can run (device "cuda-emulated"; one ctest
# cuda.mpi.<name>.np<N> per rank count in RANKS, each rank its own emulated device), labels unit;cuda;mpi +
# LABELS. TIMEOUT 300: a rank left waiting in a collective (an error not
# agreed) fails instead of hanging CI.
function(surrogate_add_emulated_device_mpi_test name)
  if(NOT SURROGATE_HAVE_CUDA)
    return()
  endif()
  cmake_parse_arguments(T "${_surrogate_test_flags}" "" "${_surrogate_test_lists}" ${ARGN})
  set(T_NO_FMA ON)
  set(T_INTERNAL ON)
  set(T_COUPLING ON)
  _surrogate_test_executable(${name} "${SURROGATE_TESTS_DIR}/support/mpi_gtest_main.cpp")
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda)
  target_link_libraries(${name} PRIVATE MPI::MPI_CXX CUDA::cudart)
  set(labels unit cuda mpi ${T_LABELS})
  foreach(np ${T_RANKS})
    add_test(NAME cuda.mpi.${name}.np${np}
             COMMAND ${SURROGATE_MPIEXEC} ${np} ${SURROGATE_MPIEXEC_FLAGS} $<TARGET_FILE:${name}>)
    set_tests_properties(cuda.mpi.${name}.np${np} PROPERTIES PROCESSORS ${np} LABELS "${labels}"
                         ENVIRONMENT "${SURROGATE_TEST_ENV};SURROGATE_TEST_DEVICE=cuda-emulated" TIMEOUT 300)
  endforeach()
endfunction()

# A command-line test cli.<name>: runs COMMAND (through tests/cli/run_cli.cmake), expects success (or
# failure with FAIL, or with exactly the status EXIT_CODE), its output to match the regular expression
# EXPECT, then runs THEN (a checker).
function(surrogate_cli_test name)
  cmake_parse_arguments(T "FAIL" "EXPECT;EXIT_CODE" "COMMAND;THEN;FIXTURES;LABELS" ${ARGN})
  # Lists travel to the script joined with "@@" (a plain ";" would be split by add_test).
  string(REPLACE ";" "@@" command "${T_COMMAND}")
  string(REPLACE ";" "@@" then "${T_THEN}")
  set(args -DCOMMAND=${command})
  if(T_FAIL)
    list(APPEND args -DEXPECT_FAIL=ON)
  endif()
  if(DEFINED T_EXIT_CODE)  # a failure with exactly this exit status
    list(APPEND args -DEXIT_CODE=${T_EXIT_CODE})
  endif()
  if(DEFINED T_EXPECT)
    list(APPEND args "-DEXPECT=${T_EXPECT}")
  endif()
  if(T_THEN)
    list(APPEND args -DTHEN=${then})
  endif()
  add_test(NAME cli.${name} COMMAND ${CMAKE_COMMAND} ${args} -P ${SURROGATE_TESTS_DIR}/cli/run_cli.cmake)
  set(fixtures cli_inputs ${T_FIXTURES})
  set(labels cli ${T_LABELS})
  if("cuda-emulated" IN_LIST T_COMMAND)  # the device code on the host backend: part of `ctest -L cuda`
    list(APPEND labels cuda)
  endif()
  set_tests_properties(cli.${name} PROPERTIES LABELS "${labels}" ENVIRONMENT "${SURROGATE_TEST_ENV}"
                       FIXTURES_REQUIRED "${fixtures}")
endfunction()

# `surrogate predict --device ...` through tests/device/cli_device.cmake: MODE fail (must fail, output matching
# EXPECT), fail_without_gpu (must fail so without a visible GPU, else succeed and pass THEN).
function(surrogate_cli_device_test name mode expect)
  cmake_parse_arguments(T "" "" "COMMAND;THEN;FIXTURES;LABELS" ${ARGN})
  string(REPLACE ";" "@@" command "${T_COMMAND}")
  string(REPLACE ";" "@@" then "${T_THEN}")
  add_test(NAME cli.${name}
           COMMAND ${CMAKE_COMMAND} -DCOMMAND=${command} -DTHEN=${then} -DMODE=${mode} "-DEXPECT=${expect}"
                   -P ${SURROGATE_TESTS_DIR}/device/cli_device.cmake)
  set(fixtures cli_inputs ${T_FIXTURES})
  set(labels cli gpu ${T_LABELS})
  set_tests_properties(cli.${name} PROPERTIES LABELS "${labels}" ENVIRONMENT "${SURROGATE_TEST_ENV}"
                       FIXTURES_REQUIRED "${fixtures}")
endfunction()

# One more run of an existing test binary on the kernels of another instruction set (SURROGATE_CPU_ISA):
# ctest NAME, under mpirun with RANKS ranks when given, with ARGS (e.g. a gtest filter). Reported as
# skipped when the binary says it skipped (an instruction set this CPU lacks).
function(surrogate_add_isa_run name)
  cmake_parse_arguments(T "" "TARGET;ISA;RANKS" "ARGS;LABELS" ${ARGN})
  set(env "OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1;SURROGATE_CPU_ISA=${T_ISA}")
  if(T_RANKS)
    add_test(NAME ${name} COMMAND ${SURROGATE_MPIEXEC} ${T_RANKS} ${SURROGATE_MPIEXEC_FLAGS} $<TARGET_FILE:${T_TARGET}> ${T_ARGS})
    set_tests_properties(${name} PROPERTIES PROCESSORS ${T_RANKS})
  else()
    add_test(NAME ${name} COMMAND ${T_TARGET} ${T_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" ENVIRONMENT "${env}"
                       SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endfunction()
