# Warning flags for the project's own targets (third-party headers come in as -isystem).
add_library(surrogate_warnings INTERFACE)
add_library(surrogate::warnings ALIAS surrogate_warnings)
target_compile_options(surrogate_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
                           -Wunused -Woverloaded-virtual -Wnull-dereference -Wformat=2>
  $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wpedantic>)
option(SURROGATE_WERROR "Treat warnings as errors" OFF)
if(SURROGATE_WERROR)
  target_compile_options(surrogate_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:-Werror>)
endif()
