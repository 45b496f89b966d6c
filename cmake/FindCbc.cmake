# Finds COIN-OR CBC, the MILP solver behind `--planner optimal`
# (src/hyperoffload/plan/optimal/cbc_solver.cc), through its pkg-config file
# `cbc.pc` (Debian: coinor-libcbc-dev, listed in scripts/debian-packages.txt).
#
# Defines Cbc_FOUND, Cbc_VERSION and the imported target Cbc::Cbc, which carries
# the include directory (/usr/include/coin) and every library cbc.pc names
# (CbcSolver, Cbc, Cgl, OsiClp, Clp, Osi, CoinUtils and their own dependencies),
# resolved to absolute paths so scripts/check-deps.py can name their packages.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_CBC QUIET IMPORTED_TARGET cbc)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Cbc
  REQUIRED_VARS PC_CBC_FOUND
  VERSION_VAR PC_CBC_VERSION
  REASON_FAILURE_MESSAGE "install coinor-libcbc-dev (scripts/install-deps.sh) and pkg-config")

if(Cbc_FOUND AND NOT TARGET Cbc::Cbc)
  set(Cbc_VERSION ${PC_CBC_VERSION})
  add_library(Cbc::Cbc INTERFACE IMPORTED)
  target_link_libraries(Cbc::Cbc INTERFACE PkgConfig::PC_CBC)
endif()
