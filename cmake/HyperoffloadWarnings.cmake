# Warning flags for the project's own targets (not for third-party headers).
add_library(hyperoffload_warnings INTERFACE)
target_compile_options(hyperoffload_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wconversion -Wsign-conversion
  -Wno-sign-conversion -Wimplicit-fallthrough)
if(HYPEROFFLOAD_WERROR)
  target_compile_options(hyperoffload_warnings INTERFACE -Werror)
endif()
