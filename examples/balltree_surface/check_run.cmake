# Runs the example and checks its output: the rms error of the predicted Cp against the closed form below
# MAX_RMS, the VTK series written (when the build has VTK); saves the error line and the prediction digest
# for compare_figures.cmake.
#   cmake -DCOMMAND=a@@b@@... -DOUTPUT=dir -DMAX_RMS=x -DVTK=ON|OFF -P check_run.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/check_helpers.cmake)
example_run(out)
example_save_figures("${out}" "Cp error vs closed form: [^\n]*" "prediction digest: [0-9a-f]+")
string(REGEX MATCH "Cp error vs closed form: rms ([0-9.]+) max ([0-9.]+)" _ "${out}")
set(rms ${CMAKE_MATCH_1})
if(NOT rms LESS MAX_RMS) # (if() compares numbers as doubles)
  message(FATAL_ERROR "rms error ${rms} is not below ${MAX_RMS}")
endif()
if(VTK)
  example_expect_vtk(surface Cp_exact surrogate_Cp Cp_error normal)
endif()
message("balltree_surface: rms error ${rms} < ${MAX_RMS}")
