# Runs the example and checks its output: exit status, the cp rms error and the drag model's largest
# relative error within their bounds (README.md, "Tests"), the VTK series when the build has VTK; saves the
# printed figures (the table, the errors, the digests) for compare_figures.cmake.
#   cmake -DCOMMAND=a@@b@@... -DOUTPUT=dir -DMAX_CP_RMS=x -DMAX_DRAG_RELATIVE=y -DVTK=ON|OFF -P check_run.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/check_helpers.cmake)
example_run(out)
example_save_figures("${out}" "body  a [^\n]*\n([ 0-9][^\n]*\n)+" "drag model error: [^\n]*"
                     "cp error vs closed form: [^\n]*" "field digest: [^\n]*")
string(REGEX MATCH "cp error vs closed form: rms ([0-9.]+)" _ "${out}")
set(cp_rms ${CMAKE_MATCH_1})
string(REGEX MATCH "largest relative ([0-9.]+)" _ "${out}")
set(drag_relative ${CMAKE_MATCH_1})
if(cp_rms GREATER MAX_CP_RMS) # (if() compares numbers as doubles)
  message(FATAL_ERROR "cp rms error ${cp_rms} is above ${MAX_CP_RMS}")
endif()
if(drag_relative GREATER MAX_DRAG_RELATIVE)
  message(FATAL_ERROR "drag model relative error ${drag_relative} is above ${MAX_DRAG_RELATIVE}")
endif()
if(VTK)
  example_expect_vtk(shapes cp_exact cp_predicted cp_error shape normal area_weight)
endif()
message("sequoia_shapes: cp rms ${cp_rms} <= ${MAX_CP_RMS}, drag relative ${drag_relative} <= ${MAX_DRAG_RELATIVE}")
