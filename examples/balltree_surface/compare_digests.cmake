# The prediction digests (FNV-1a of every predicted value in point order) of two rank counts must be
# equal: the registered Erwin model is bitwise independent of the rank count (share/docs/balltree.md).
#   cmake -DFIRST=dir -DSECOND=dir -P compare_digests.cmake
foreach(which FIRST SECOND)
  if(NOT EXISTS ${${which}}/digest.txt)
    message(FATAL_ERROR "missing ${${which}}/digest.txt (run examples.balltree_surface.np1 and .np3 first)")
  endif()
  file(READ ${${which}}/digest.txt ${which}_digest)
endforeach()
if(NOT FIRST_digest STREQUAL SECOND_digest)
  message(FATAL_ERROR "the predictions differ: digest ${FIRST_digest} (${FIRST}) vs ${SECOND_digest} (${SECOND})")
endif()
message("same predictions on both rank counts (digest ${FIRST_digest})")
