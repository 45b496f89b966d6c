# ctest tests that build the libFuzzer harnesses (the `fuzz` preset, clang, build-fuzz/)
# and run each for a short, bounded smoke on its seed corpus (scripts/run-fuzzers.sh
# --smoke: every seed, then SMOKE_SECONDS of fuzzing into a scratch corpus). Included
# by tests/CMakeLists.txt so `make test` runs them; `make fuzz` fuzzes for longer.
file(GLOB fuzz_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/fuzz/*_fuzzer.cc)
add_test(NAME fuzz.build COMMAND ${PROJECT_SOURCE_DIR}/scripts/build-fuzzers.sh)
# A clean build compiles the library again with clang and the sanitizers.
set_tests_properties(fuzz.build PROPERTIES FIXTURES_SETUP fuzzers LABELS fuzz TIMEOUT 1200)
foreach(source IN LISTS fuzz_sources)
  get_filename_component(name ${source} NAME_WE)
  string(REGEX REPLACE "_fuzzer$" "" name ${name})
  add_test(NAME fuzz.smoke.${name} COMMAND ${PROJECT_SOURCE_DIR}/scripts/run-fuzzers.sh --smoke --no-build ${name})
  set_tests_properties(fuzz.smoke.${name} PROPERTIES FIXTURES_REQUIRED fuzzers LABELS fuzz TIMEOUT 300)
endforeach()
