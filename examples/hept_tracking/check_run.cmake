# Runs the example and checks its output: exit status, the efficiency and the official accuracy@0.9 at or
# above their floors (README.md, "Tests"), the VTK series when the build has VTK; saves the printed
# figures (candidates, efficiency, purity, accuracy, embedding digest) for compare_figures.cmake.
#   cmake -DCOMMAND=a@@b@@... -DOUTPUT=dir -DMIN_EFFICIENCY=x -DMIN_ACCURACY=y -DVTK=ON|OFF -P check_run.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/check_helpers.cmake)
example_run(out)
example_save_figures("${out}" "track candidates: [^\n]*" "efficiency [^\n]*" "purity [^\n]*"
                     "accuracy@0.9 [^\n]*" "embedding digest: [^\n]*")
string(REGEX MATCH "efficiency ([0-9.]+)" _ "${out}")
set(efficiency ${CMAKE_MATCH_1})
string(REGEX MATCH "accuracy@0.9 \\(official metric\\) ([0-9.]+)" _ "${out}")
set(accuracy ${CMAKE_MATCH_1})
if(efficiency LESS MIN_EFFICIENCY) # (if() compares numbers as doubles)
  message(FATAL_ERROR "efficiency ${efficiency} is below ${MIN_EFFICIENCY}")
endif()
if(accuracy LESS MIN_ACCURACY)
  message(FATAL_ERROR "accuracy@0.9 ${accuracy} is below ${MIN_ACCURACY}")
endif()
if(VTK)
  example_expect_vtk(hits predicted_track predicted_track_colour true_particle true_particle_colour pt layer embedding)
endif()
message("hept_tracking: efficiency ${efficiency} >= ${MIN_EFFICIENCY}, accuracy@0.9 ${accuracy} >= ${MIN_ACCURACY}")
