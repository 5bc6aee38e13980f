# Runs COMMAND (arguments separated by @@) and writes its standard output to OUTPUT; fails with the
# program's output when it fails.
string(REPLACE "@@" ";" command "${COMMAND}")
execute_process(COMMAND ${command} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exit status ${rc}: ${command}")
endif()
file(WRITE ${OUTPUT} "${out}")
