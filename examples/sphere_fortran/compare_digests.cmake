# Compares the digests that check_run.cmake saved for two rank counts (sums of q and q^2 of the solver's
# state and of the prediction at the last step, summed in global point order on rank 0): identical
# strings, since the solver does the same operations on every cell whatever the band split and the
# library's spherical models are bitwise rank-independent (share/docs/sphere.md).
#   cmake -DFIRST=dir -DSECOND=dir -P compare_digests.cmake
foreach(which FIRST SECOND)
  if(NOT EXISTS ${${which}}/digest.txt)
    message(FATAL_ERROR "missing ${${which}}/digest.txt (run examples.sphere_fortran.np1 and .np3 first)")
  endif()
  file(READ ${${which}}/digest.txt ${which}_values)
  string(STRIP "${${which}_values}" ${which}_values)
endforeach()
set(names "solver sum of q" "solver sum of q^2" "prediction sum of q" "prediction sum of q^2")
foreach(i 0 1 2 3)
  list(GET FIRST_values ${i} a)
  list(GET SECOND_values ${i} b)
  list(GET names ${i} name)
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${name}: ${a} (${FIRST}) differs from ${b} (${SECOND})")
  endif()
  message("${name}: ${a} on both")
endforeach()
