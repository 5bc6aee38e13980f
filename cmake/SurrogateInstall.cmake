# Installation: libraries, headers, the CLI, share/ (exporter, references, docs, models), and a CMake
# package so that a solver can find_package(surrogate) and link surrogate::coupling.
install(EXPORT surrogateTargets NAMESPACE surrogate:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/surrogate)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/surrogateConfig.cmake.in
  ${PROJECT_BINARY_DIR}/surrogateConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/surrogate
  PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/surrogateConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/surrogateConfig.cmake ${PROJECT_BINARY_DIR}/surrogateConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/surrogate)

configure_file(${PROJECT_SOURCE_DIR}/cmake/surrogate.pc.in ${PROJECT_BINARY_DIR}/surrogate.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/surrogate.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/share/ DESTINATION ${CMAKE_INSTALL_DATADIR}/surrogate
        USE_SOURCE_PERMISSIONS PATTERN "__pycache__" EXCLUDE)
