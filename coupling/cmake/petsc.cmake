# PETSc Vec adapters (surrogate/petsc.h): compiled into surrogate_coupling when PETSc was found
# (cmake/SurrogateDependencies.cmake sets SURROGATE_HAVE_PETSC and the imported target PkgConfig::PETSC).
# Included OPTIONALly by coupling/CMakeLists.txt.
if(SURROGATE_HAVE_PETSC)
  target_sources(surrogate_coupling PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../src/petsc.cpp ${CMAKE_CURRENT_LIST_DIR}/../src/petsc_snes.cpp)
  # Users test `#ifdef SURROGATE_HAVE_PETSC` before including surrogate/petsc.h.
  target_compile_definitions(surrogate_coupling PUBLIC SURROGATE_HAVE_PETSC=1)
  # The build tree (tests, examples) gets PETSc's include directories and library through the target;
  # an installed surrogate::coupling does not name PkgConfig::PETSC (a pkg-config imported target the
  # package config does not recreate): PETSc codes that include surrogate/petsc.h already use PETSc.
  target_link_libraries(surrogate_coupling PUBLIC $<BUILD_INTERFACE:PkgConfig::PETSC>)
endif()
