# Helpers of the examples' check_run.cmake scripts (ExampleTests.cmake, the Fortran examples): run the
# example, find and save the figures it printed, check the parallel VTK series it wrote. Inputs: COMMAND
# (a@@b@@...), OUTPUT (dir).

# Runs COMMAND in a clean OUTPUT; the printed text (stdout and stderr) in `out_var`; fails on a non-zero exit.
function(example_run out_var)
  string(REPLACE "@@" ";" command "${COMMAND}")
  file(REMOVE_RECURSE ${OUTPUT})
  execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the example failed (exit status ${rc})")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# The text matching each regex in `text` (failing if one is missing), one per line, into OUTPUT/figures.txt
# (compare_figures.cmake).
function(example_save_figures text)
  set(figures "")
  foreach(pattern ${ARGN})
    if(NOT text MATCHES "(${pattern})")
      message(FATAL_ERROR "no line '${pattern}' in the output")
    endif()
    string(APPEND figures "${CMAKE_MATCH_1}\n")
  endforeach()
  file(WRITE ${OUTPUT}/figures.txt "${figures}")
endfunction()

# OUTPUT/<series>.pvd and <series>_000000.pvtu exist and the latter names every array given.
function(example_expect_vtk series)
  foreach(file ${series}.pvd ${series}_000000.pvtu)
    if(NOT EXISTS ${OUTPUT}/${file})
      message(FATAL_ERROR "missing ${OUTPUT}/${file}")
    endif()
  endforeach()
  file(READ ${OUTPUT}/${series}_000000.pvtu pvtu)
  foreach(array ${ARGN})
    if(NOT pvtu MATCHES "Name=\"${array}\"")
      message(FATAL_ERROR "${series}_000000.pvtu has no array ${array}")
    endif()
  endforeach()
endfunction()
