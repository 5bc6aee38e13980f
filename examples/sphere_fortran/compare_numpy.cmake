# Compares the Fortran solver's digest (sums of q and q^2 after STEPS steps, digest.txt of a run) with the
# NumPy port that made the training data (share/training/sphere_solver.py): within 1e-12 relative (the
# two sum the polar caps' fluxes in different orders; everything else is the same operations).
#   cmake -DPYTHON=python3 -DSOLVER=sphere_solver.py -DSTEPS=n -DRUN=dir -P compare_numpy.cmake
if(NOT EXISTS ${RUN}/digest.txt)
  message(FATAL_ERROR "missing ${RUN}/digest.txt (run examples.sphere_fortran.np3 first)")
endif()
file(READ ${RUN}/digest.txt fortran)
string(STRIP "${fortran}" fortran)
execute_process(COMMAND ${PYTHON} ${SOLVER} --steps ${STEPS} --compare ${fortran}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the NumPy solver and the Fortran solver disagree (or the comparison failed: ${rc})")
endif()
