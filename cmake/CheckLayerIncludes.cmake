cmake_minimum_required(VERSION 3.25)
# Build-time check that one layer of src/hyperoffload/ includes only its own
# headers and those of the layers it is declared to depend on (src/CMakeLists.txt,
# hyperoffload_layer), so that an upward include fails the build instead of
# quietly creating a cycle. Run by CMake in script mode:
#   cmake -DLAYER=plan -DALLOWED="plan;ir;model" -DSOURCE_DIR=src/hyperoffload -DSTAMP=... -P CheckLayerIncludes.cmake
file(GLOB_RECURSE files "${SOURCE_DIR}/${LAYER}/*.h" "${SOURCE_DIR}/${LAYER}/*.cc")
set(problems "")
foreach(file IN LISTS files)
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"hyperoffload/[a-z_]+/")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"hyperoffload/([a-z_]+)/.*$" "\\1" used "${line}")
    if(NOT used IN_LIST ALLOWED)
      file(RELATIVE_PATH where "${SOURCE_DIR}" "${file}")
      string(STRIP "${line}" line)
      string(APPEND problems "  ${where}: ${line} (layer ${LAYER} may include only: ${ALLOWED})\n")
    endif()
  endforeach()
endforeach()
if(problems)
  message(FATAL_ERROR "upward or undeclared include across layers (docs/ARCHITECTURE.md):\n${problems}")
endif()
file(WRITE "${STAMP}" "ok\n")
