# Runs the Fortran example and checks its output: every step printed, the worst relative L2 error of the
# predicted velocity below MAX_ERROR, both VTK series written with one step per time step.
#   cmake -DCOMMAND=a@@b@@... -DOUTPUT=dir -DSTEPS=n -DMAX_ERROR=x -P check_run.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/check_helpers.cmake)
example_run(out)

# One table line per step: step, time, cylinder y, rel. L2 (u,v), rel. L2 (Cp), ...
string(REGEX MATCHALL "\n *[0-9]+ +[0-9.]+ +-?[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+" lines "${out}")
list(LENGTH lines n)
if(NOT n EQUAL STEPS)
  message(FATAL_ERROR "expected ${STEPS} step lines, found ${n}")
endif()
if(NOT out MATCHES "max relative L2 error over [0-9]+ steps: \\(u,v\\) +([0-9.]+) +Cp +([0-9.]+)")
  message(FATAL_ERROR "no error summary in the output")
endif()
set(velocity_error ${CMAKE_MATCH_1})
set(cp_error ${CMAKE_MATCH_2})
foreach(value velocity_error cp_error)
  if(NOT ${value} LESS MAX_ERROR) # (if() compares numbers as doubles)
    message(FATAL_ERROR "${value} ${${value}} is not below ${MAX_ERROR}")
  endif()
endforeach()

foreach(series cloud particles)
  if(NOT EXISTS ${OUTPUT}/${series}.pvd)
    message(FATAL_ERROR "missing ${OUTPUT}/${series}.pvd")
  endif()
  file(READ ${OUTPUT}/${series}.pvd pvd)
  string(REGEX MATCHALL "<DataSet " datasets "${pvd}")
  list(LENGTH datasets n)
  if(NOT n EQUAL STEPS)
    message(FATAL_ERROR "${series}.pvd lists ${n} steps, expected ${STEPS}")
  endif()
endforeach()
# The prediction digest, for examples.fortran_loop.same_across_ranks (compare_digests.cmake).
if(NOT out MATCHES "prediction digest [^:]*: *([-+0-9.eE]+) +([-+0-9.eE]+) +([-+0-9.eE]+)")
  message(FATAL_ERROR "no prediction digest in the output")
endif()
file(WRITE ${OUTPUT}/digest.txt "${CMAKE_MATCH_1};${CMAKE_MATCH_2};${CMAKE_MATCH_3}")

message("fortran_loop: ${STEPS} steps, worst relative L2 error (u,v) ${velocity_error}, Cp ${cp_error} (< ${MAX_ERROR}); "
        "cloud.pvd and particles.pvd written")
