# surrogate_add_example_tests: the ctest runs of an MPI example (README.md of each example, "Tests").
#   surrogate_add_example_tests(NAME ex LABEL family ARGS --opt;value;... CHECK_ARGS -DMAX_X=1;...
#                               [VARIANT name])
# registers examples.<ex>.np1 and .np3 (the example under mpirun through its check_run.cmake, output in
# test_np<n>), examples.<ex>.paraview.np<n> when the folder has expect_vtk.json.in and the build has VTK
# (pvbatch opens the series; skipped without ParaView), and examples.<ex>.same_across_ranks (the figures
# the two runs saved are equal: compare_figures.cmake). A VARIANT (other arguments, say another device)
# registers examples.<ex>.<variant>.np1, .np3 and .same_across_ranks, output in test_<variant>_np<n>.
function(surrogate_add_example_tests)
  cmake_parse_arguments(PARSE_ARGV 0 ex "" "NAME;LABEL;VARIANT" "ARGS;CHECK_ARGS")
  set(mpiexec ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
  set(mpiexec_flags --allow-run-as-root --oversubscribe)  # root in CI containers, more ranks than cores
  set(dir ${CMAKE_CURRENT_BINARY_DIR})
  set(prefix examples.${ex_NAME})
  set(run ${ex_NAME})  # the output folders' and fixtures' stem
  if(ex_VARIANT)
    set(prefix ${prefix}.${ex_VARIANT})
    set(run ${ex_NAME}_${ex_VARIANT})
  endif()
  foreach(np 1 3)
    if(ex_VARIANT)
      set(out ${dir}/test_${ex_VARIANT}_np${np})
    else()
      set(out ${dir}/test_np${np})
    endif()
    set(out_${np} ${out})
    string(REPLACE ";" "@@" command "${mpiexec};${np};${mpiexec_flags};$<TARGET_FILE:${ex_NAME}>;${ex_ARGS};--output;${out}")
    add_test(NAME ${prefix}.np${np}
             COMMAND ${CMAKE_COMMAND} -DCOMMAND=${command} -DOUTPUT=${out} -DVTK=${SURROGATE_HAVE_VTK} ${ex_CHECK_ARGS}
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/check_run.cmake)
    set_tests_properties(${prefix}.np${np} PROPERTIES PROCESSORS ${np} LABELS "examples;${ex_LABEL}"
                         ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1"
                         FIXTURES_SETUP ${run}_np${np})
    if(NOT ex_VARIANT AND SURROGATE_HAVE_VTK AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/expect_vtk.json.in)
      configure_file(${CMAKE_CURRENT_SOURCE_DIR}/expect_vtk.json.in ${dir}/expect_vtk_np${np}.json @ONLY)
      add_test(NAME ${prefix}.paraview.np${np}
               COMMAND ${PROJECT_SOURCE_DIR}/share/tools/pvbatch-headless ${PROJECT_SOURCE_DIR}/share/tools/check_vtk.py
                       ${dir}/expect_vtk_np${np}.json)
      set_tests_properties(${prefix}.paraview.np${np} PROPERTIES LABELS "examples;${ex_LABEL};paraview"
                           FIXTURES_REQUIRED ${run}_np${np} SKIP_RETURN_CODE 77 TIMEOUT 300
                           ENVIRONMENT "OMP_NUM_THREADS=1")
    endif()
  endforeach()
  add_test(NAME ${prefix}.same_across_ranks
           COMMAND ${CMAKE_COMMAND} -DNAME=${ex_NAME} -DFIRST=${out_1} -DSECOND=${out_3}
                   -P ${PROJECT_SOURCE_DIR}/examples/cmake/compare_figures.cmake)
  set_tests_properties(${prefix}.same_across_ranks PROPERTIES LABELS "examples;${ex_LABEL}"
                       FIXTURES_REQUIRED "${run}_np1;${run}_np3")
endfunction()
