# VTK output: surrogate::VtkSeries and the surrogate_vtk_* C functions. The sources are always built
# (argument checks, .pvtu and .pvd writing and the whole VTKHDF format are plain C++ and HDF5); only the
# per-rank .vtu pieces need VTK's XML writer. Without VTK a series in the vtu format (the default) fails
# with Error(unsupported); the vtkhdf format works.
target_sources(surrogate_coupling PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/../src/vtk_series.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../src/vtk_agreement.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../src/vtu_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../src/vtkhdf_files.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../src/c_api_vtk.cpp)
if(SURROGATE_HAVE_VTK)
  # Only the XML modules (toolchain.md G6, G9); private: VTK does not appear in surrogate's headers.
  set(_surrogate_vtk_modules VTK::CommonCore VTK::CommonDataModel VTK::IOXML)
  target_link_libraries(surrogate_coupling PRIVATE ${_surrogate_vtk_modules})
  target_compile_definitions(surrogate_coupling PRIVATE SURROGATE_HAVE_VTK=1)
  vtk_module_autoinit(TARGETS surrogate_coupling MODULES ${_surrogate_vtk_modules})
  unset(_surrogate_vtk_modules)
endif()
