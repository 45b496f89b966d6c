# HYPEROFFLOAD_SANITIZE=address → ASan + UBSan; =thread → TSan. Applied globally so
# every target (library, tests, benchmarks) is instrumented consistently.
if(HYPEROFFLOAD_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(HYPEROFFLOAD_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT HYPEROFFLOAD_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HYPEROFFLOAD_SANITIZE must be address, thread or empty")
endif()
