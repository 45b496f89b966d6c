# HYPEROFFLOAD_SANITIZE=address → ASan + UBSan; =thread → TSan. Applied globally so
# every target (library, tests, benchmarks) is instrumented consistently.
# HYPEROFFLOAD_FUZZ adds libFuzzer's coverage instrumentation to ASan + UBSan
# (the harnesses link libFuzzer itself, fuzz/CMakeLists.txt).
if(HYPEROFFLOAD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "HYPEROFFLOAD_FUZZ needs clang (the fuzz preset uses clang++-19 from scripts/debian-packages.txt)")
  endif()
  if(NOT HYPEROFFLOAD_SANITIZE STREQUAL "" AND NOT HYPEROFFLOAD_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "HYPEROFFLOAD_FUZZ builds with ASan + UBSan; HYPEROFFLOAD_SANITIZE must be empty or address")
  endif()
  set(HYPEROFFLOAD_SANITIZE "")
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
if(HYPEROFFLOAD_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(HYPEROFFLOAD_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT HYPEROFFLOAD_SANITIZE STREQUAL "")
  message(FATAL_ERROR "HYPEROFFLOAD_SANITIZE must be address, thread or empty")
endif()
