# A fresh copy of the selftest data (TO) and an empty scratch folder beside it (TO.tmp, the TMPDIR of the
# corrupted-reference tests, which keep their outputs there):   cmake -DFROM=... -DTO=... -P selftest_copy.cmake
file(REMOVE_RECURSE ${TO} ${TO}.tmp)
file(MAKE_DIRECTORY ${TO}.tmp)
file(COPY ${FROM}/ DESTINATION ${TO})
