# The figures two rank counts of an example printed (saved by its check_run.cmake as figures.txt: digests of
# the predictions, the derived figures) must be equal: the predictions do not depend on the rank count.
#   cmake -DNAME=example -DFIRST=dir -DSECOND=dir -P compare_figures.cmake
foreach(which FIRST SECOND)
  if(NOT EXISTS ${${which}}/figures.txt)
    message(FATAL_ERROR "missing ${${which}}/figures.txt (run examples.${NAME}.np1 and .np3 first)")
  endif()
  file(READ ${${which}}/figures.txt ${which}_figures)
endforeach()
if(NOT FIRST_figures STREQUAL SECOND_figures)
  message(FATAL_ERROR "the figures differ:\n${FIRST}:\n${FIRST_figures}\n${SECOND}:\n${SECOND_figures}")
endif()
message("same figures on both rank counts:\n${FIRST_figures}")
