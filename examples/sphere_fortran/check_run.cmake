# Runs the Fortran sphere example and checks its output: every step printed, the worst relative L2 error of
# the predicted state below MAX_ERROR and of the increment below MAX_INCREMENT_ERROR, the VTK series written
# with one step per time step; saves the two
# digests (digest.txt, for compare_digests.cmake and compare_numpy.cmake) and what ParaView must find
# (expect.json, for share/tools/check_vtk.py).
#   cmake -DCOMMAND=a@@b@@... -DOUTPUT=dir -DSTEPS=n -DMAX_ERROR=x -DMAX_INCREMENT_ERROR=y -DRANKS=p
#         [-DVTK=OFF] -P check_run.cmake     (VTK=OFF: a build without VTK, the run made with --vtk-every 0)
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/check_helpers.cmake)
example_run(out)

# One table line per step: step, time, rel. L2 state, rel. L2 increment, max |error|, mass change, times.
set(number "[-+0-9.E]+")
string(REGEX MATCHALL "\n *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +${number} +${number} +[0-9.]+ +[0-9.]+" lines "${out}")
list(LENGTH lines n)
if(NOT n EQUAL STEPS)
  message(FATAL_ERROR "expected ${STEPS} step lines, found ${n}")
endif()
if(NOT out MATCHES "max relative L2 error over [0-9]+ steps: state +([0-9.]+) +increment +([0-9.]+)")
  message(FATAL_ERROR "no error summary in the output")
endif()
set(state_error ${CMAKE_MATCH_1})
set(increment_error ${CMAKE_MATCH_2})
if(NOT state_error LESS MAX_ERROR) # (if() compares numbers as doubles)
  message(FATAL_ERROR "the worst relative L2 error of the predicted state, ${state_error}, is not below ${MAX_ERROR}")
endif()
if(NOT increment_error LESS MAX_INCREMENT_ERROR)
  message(FATAL_ERROR "the worst relative L2 error of the predicted increment, ${increment_error}, is not below "
                      "${MAX_INCREMENT_ERROR}")
endif()
if(NOT out MATCHES "relative mass change of the solver: +(${number})")
  message(FATAL_ERROR "no mass change in the output")
endif()
set(mass_change ${CMAKE_MATCH_1})
string(REGEX REPLACE "^-" "" mass_magnitude "${mass_change}")
if(NOT mass_magnitude MATCHES "E-1[2-9]$|E-[2-9][0-9]$|^0.0+E\\+00$")
  message(FATAL_ERROR "the solver does not conserve the mass to 1e-12: relative change ${mass_change}")
endif()

if(NOT DEFINED VTK OR VTK)
  if(NOT EXISTS ${OUTPUT}/sphere.pvd)
    message(FATAL_ERROR "missing ${OUTPUT}/sphere.pvd")
  endif()
  file(READ ${OUTPUT}/sphere.pvd pvd)
  string(REGEX MATCHALL "<DataSet " datasets "${pvd}")
  list(LENGTH datasets n)
  if(NOT n EQUAL STEPS)
    message(FATAL_ERROR "sphere.pvd lists ${n} steps, expected ${STEPS}")
  endif()
  file(GLOB pvtu_files ${OUTPUT}/*.pvtu)
  list(SORT pvtu_files)
  list(LENGTH pvtu_files n)
  if(NOT n EQUAL STEPS)
    message(FATAL_ERROR "${n} .pvtu files in ${OUTPUT}, expected ${STEPS}")
  endif()
endif()

# The digests, for examples.sphere_fortran.same_across_ranks and .solver_matches_numpy.
if(NOT out MATCHES "solver digest [^:]*: *(${number}) +(${number})")
  message(FATAL_ERROR "no solver digest in the output")
endif()
set(solver "${CMAKE_MATCH_1};${CMAKE_MATCH_2}")
if(NOT out MATCHES "prediction digest [^:]*: *(${number}) +(${number})")
  message(FATAL_ERROR "no prediction digest in the output")
endif()
file(WRITE ${OUTPUT}/digest.txt "${solver};${CMAKE_MATCH_1};${CMAKE_MATCH_2}")

if(NOT DEFINED VTK OR VTK)
  # What ParaView must see: 33 x 64 points, plus one halo row of 64 points per band boundary; 32 x 64 cells
  # (quads, triangles at the poles); the four arrays; the time steps 0.05 .. STEPS * 0.05.
  math(EXPR points "33 * 64 + (${RANKS} - 1) * 64")
  math(EXPR last_rank "${RANKS} - 1")
  set(times "")
  foreach(step RANGE 1 ${STEPS})
    math(EXPR hundredths "${step} * 5")
    if(hundredths LESS 10)
      set(hundredths "0${hundredths}")
    endif()
    string(REGEX REPLACE "(..)$" ".\\1" time "${hundredths}")
    string(REGEX REPLACE "^\\." "0." time "${time}")
    list(APPEND times "${time}")
  endforeach()
  list(GET pvtu_files -1 last_pvtu)
  list(GET times -1 last_time)
  string(REPLACE ";" ", " times_json "${times}")
  file(WRITE ${OUTPUT}/expect.json "{
  \"pvtu\": \"${last_pvtu}\", \"pvtu_time\": ${last_time},
  \"pvd\": \"${OUTPUT}/sphere.pvd\", \"times\": [${times_json}],
  \"points\": ${points}, \"cells\": 2048, \"pieces\": ${RANKS},
  \"arrays\": {\"q_solver\": {\"components\": 1, \"ranges\": null},
             \"q_surrogate\": {\"components\": 1, \"ranges\": null},
             \"q_error\": {\"components\": 1, \"ranges\": null},
             \"rank\": {\"components\": 1, \"ranges\": {\"*\": [[0, ${last_rank}]]}}},
  \"units\": {\"q_solver\": \"1\", \"q_surrogate\": \"1\", \"q_error\": \"1\"},
  \"color_by\": \"q_surrogate\", \"camera\": \"feature\", \"png\": \"${OUTPUT}/sphere.png\"
}
")
endif()

if(NOT DEFINED VTK OR VTK)
  set(vtk_note "sphere.pvd written")
else()
  set(vtk_note "no VTK in this build")
endif()
message("sphere_fortran: ${STEPS} steps on ${RANKS} rank(s), worst relative L2 error of the predicted state "
        "${state_error} (< ${MAX_ERROR}), of the increment ${increment_error} (< ${MAX_INCREMENT_ERROR}); mass change ${mass_change}; "
        "${vtk_note}")
