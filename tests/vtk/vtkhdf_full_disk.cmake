# VTKHDF steps onto a full file system (share/docs/reliability.md, outputs): every rank must fail with the
# same clean error (no hang: a timeout), no temporary may be left, and the steps written before must stay
# byte for byte. A 1 MiB tmpfs is mounted at WORK/fs when this process may mount (root); otherwise the test
# prints SKIP (the injected failure of SURROGATE_TEST_FAIL_WRITE is covered by test_vtkhdf_series).
#   cmake -DCASE=vtk_paraview_case -DMPIEXEC="mpirun@@-np@@3@@..." -DMODEL=... -DWORK=dir -P vtkhdf_full_disk.cmake
string(REPLACE "@@" ";" MPIEXEC "${MPIEXEC}")
set(fs ${WORK}/fs)
execute_process(COMMAND umount ${fs} OUTPUT_QUIET ERROR_QUIET)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${fs})
execute_process(COMMAND mount -t tmpfs -o size=1m tmpfs ${fs} RESULT_VARIABLE mount_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT mount_rc EQUAL 0)
  message("SKIP: cannot mount a tmpfs here (${mount_rc})")
  return()
endif()

function(finish message_text)
  execute_process(COMMAND umount ${fs})
  if(message_text)
    message(FATAL_ERROR "${message_text}")
  endif()
endfunction()

# 1. Three steps that fit.
execute_process(COMMAND ${MPIEXEC} ${CASE} ${fs}/first ${MODEL} vtkhdf RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  finish("the first series failed (${rc}): ${out}${err}")
endif()
file(GLOB written ${fs}/first/*.hdf ${fs}/first/*.series)
list(LENGTH written count)
if(NOT count EQUAL 4)
  finish("expected 3 steps and the series file, found: ${written}")
endif()
set(before "")
foreach(f ${written})
  file(MD5 ${f} sum)
  list(APPEND before ${sum})
endforeach()

# 2. The file system filled to the last byte; a new series there.
execute_process(COMMAND dd if=/dev/zero of=${fs}/filler bs=1024 OUTPUT_QUIET ERROR_QUIET)
execute_process(COMMAND ${MPIEXEC} ${CASE} ${fs}/second ${MODEL} vtkhdf RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
if(rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$")
  finish("the series on a full file system: exit status '${rc}' (expected a clean failure, no timeout)")
endif()
if(NOT "${out}${err}" MATCHES "No space left on device")
  finish("the message does not give the reason")
endif()
if("${out}${err}" MATCHES "Segmentation|Aborted|HDF5-DIAG")
  finish("not a clean failure")
endif()
file(GLOB_RECURSE left ${fs}/.surrogate-* ${fs}/*/.surrogate-*)
file(GLOB_RECURSE steps ${fs}/second/*.hdf)
if(left OR steps)
  finish("left behind: ${left} ${steps}")
endif()

# 3. The earlier steps are untouched.
set(after "")
foreach(f ${written})
  file(MD5 ${f} sum)
  list(APPEND after ${sum})
endforeach()
if(NOT before STREQUAL after)
  finish("the earlier steps changed")
endif()
finish("")
message("full disk: a clean agreed failure, no temporary, earlier steps intact")
