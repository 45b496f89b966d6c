# Every dependency comes from a Debian package (scripts/debian-packages.txt) or, for the
# Python extension, from the virtual environment (python/requirements.txt); scripts/install-deps.sh
# installs both and scripts/check-deps.py proves the build used nothing else.
find_package(Threads REQUIRED)
find_package(simdjson REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
# The MILP solver of the optimal planner (cmake/FindCbc.cmake: pkg-config's cbc.pc).
find_package(Cbc 2.10 REQUIRED)
if(HYPEROFFLOAD_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(HYPEROFFLOAD_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

set(HYPEROFFLOAD_HAVE_CUDA OFF)
if(HYPEROFFLOAD_WITH_CUDA)
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(HYPEROFFLOAD_HAVE_CUDA ON)
    message(STATUS "hyperoffload: CUDA backend enabled (toolkit ${CUDAToolkit_VERSION})")
  else()
    message(STATUS "hyperoffload: CUDA toolkit not found; CUDA backend disabled")
  endif()
endif()

if(HYPEROFFLOAD_BUILD_PYTHON)
  # The extension is built for, and its tests run with, the interpreter of the
  # project's virtual environment (.venv, made by scripts/install-deps.sh --python
  # with the PyTorch of python/requirements.txt) — not whichever python3 is first
  # on PATH. -DPython3_EXECUTABLE=... picks another; `pip install .` passes its own.
  if(NOT SKBUILD AND NOT DEFINED Python3_EXECUTABLE AND EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(Python3_EXECUTABLE ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  endif()
  find_package(Python3 COMPONENTS Interpreter Development.Module)
  # pybind11 from the interpreter's site-packages (pip's pybind11 ships its CMake files).
  if(Python3_FOUND AND NOT DEFINED pybind11_DIR)
    execute_process(COMMAND ${Python3_EXECUTABLE} -m pybind11 --cmakedir
                    OUTPUT_VARIABLE pybind11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  endif()
  find_package(pybind11 CONFIG QUIET)
  if(NOT Python3_FOUND OR NOT pybind11_FOUND)
    message(STATUS "hyperoffload: Python3 development files or pybind11 missing; Python extension disabled "
                   "(scripts/install-deps.sh --python makes .venv with both)")
    set(HYPEROFFLOAD_BUILD_PYTHON OFF)
  endif()
endif()
