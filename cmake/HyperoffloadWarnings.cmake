# Warning flags for the project's own targets (not for third-party headers).
# -Wno-missing-field-initializers: options structs give every field a default
# (docs/ARCHITECTURE.md, STYLE), and a designated initializer that names only
# the fields it changes ({.capacity_bytes = 4096}) is how they are meant to be
# used; g++ 12 would warn on every such use.
add_library(hyperoffload_warnings INTERFACE)
target_compile_options(hyperoffload_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
  -Wcast-align -Woverloaded-virtual -Wconversion -Wsign-conversion
  -Wno-sign-conversion -Wno-missing-field-initializers -Wimplicit-fallthrough)
if(HYPEROFFLOAD_WERROR)
  target_compile_options(hyperoffload_warnings INTERFACE -Werror)
endif()
