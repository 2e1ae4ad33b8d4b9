# Third-party packages, all from Debian (scripts/install-deps.sh installs them).
#
# A machine without Debian's packages (the lent GPU machine, README "Checking the CUDA
# backend on a lent GPU") builds with what scripts/gpu-carry.sh copied into
# third_party_carry/ (STRATA_CARRY_DIR): the header-only packages (Eigen, Catch2, CLI11,
# nlohmann-json), zlib and libsodium, each found there only when the system has none. What cannot be
# carried is switched off: STRATA_WITH_OPENBLAS (Eigen's own GEMM), STRATA_WITH_PROTOBUF
# (event files through strata's own encoder), STRATA_WITH_GLOO, STRATA_WITH_ZMQ.
option(STRATA_WITH_OPENBLAS "CPU matrix products through OpenBLAS (pthread build); OFF: Eigen's own GEMM" ON)
option(STRATA_WITH_PROTOBUF "TensorBoard events serialized by protobuf-lite; OFF: strata's own encoder (same bytes)" ON)
set(STRATA_CARRY_DIR "${PROJECT_SOURCE_DIR}/third_party_carry" CACHE PATH
  "Fallback prefix for packages the system lacks (filled by scripts/gpu-carry.sh)")

# strata_find_package(<Name> <find_package args>...): the system's package, else the one in
# STRATA_CARRY_DIR, else a configure error naming both places.
macro(strata_find_package name)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND AND IS_DIRECTORY "${STRATA_CARRY_DIR}")
    set(_strata_saved_prefix_path "${CMAKE_PREFIX_PATH}")
    list(PREPEND CMAKE_PREFIX_PATH "${STRATA_CARRY_DIR}")
    find_package(${name} ${ARGN} QUIET)
    set(CMAKE_PREFIX_PATH "${_strata_saved_prefix_path}")
    if(${name}_FOUND)
      message(STATUS "strata: ${name} from ${STRATA_CARRY_DIR}")
    endif()
  endif()
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR "strata: ${name} not found on the system (scripts/install-deps.sh) nor in "
                        "${STRATA_CARRY_DIR} (scripts/gpu-carry.sh)")
  endif()
endmacro()

find_package(Threads REQUIRED)
strata_find_package(Eigen3 3.4 NO_MODULE)
strata_find_package(ZLIB)
strata_find_package(nlohmann_json 3)
strata_find_package(CLI11)

# Build-time switches that sources read (#include "strata_build_config.h", generated into
# the build tree; a header rather than compile definitions, so that a switch recompiles
# only the files that read it).
set(STRATA_HAS_OPENBLAS ${STRATA_WITH_OPENBLAS})
set(STRATA_HAS_PROTOBUF ${STRATA_WITH_PROTOBUF})
configure_file(${CMAKE_CURRENT_LIST_DIR}/strata_build_config.h.in
  ${CMAKE_BINARY_DIR}/include/strata_build_config.h @ONLY)

# OpenBLAS, pthread build: Debian's serial build is not safe when two threads call sgemm
# at once (PLATFORM.md). Link that directory explicitly rather than the libblas alternative.
# strata_openblas is empty with STRATA_WITH_OPENBLAS=OFF.
add_library(strata_openblas INTERFACE)
if(STRATA_WITH_OPENBLAS)
  find_path(OPENBLAS_INCLUDE_DIR cblas.h
    PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas NO_DEFAULT_PATH)
  find_library(OPENBLAS_LIBRARY NAMES openblas
    PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread NO_DEFAULT_PATH)
  if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
    message(FATAL_ERROR "OpenBLAS (pthread build) not found: run scripts/install-deps.sh, or "
                        "configure with -DSTRATA_WITH_OPENBLAS=OFF (Eigen's own GEMM)")
  endif()
  target_include_directories(strata_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
  target_link_libraries(strata_openblas INTERFACE ${OPENBLAS_LIBRARY})
  get_filename_component(_openblas_dir ${OPENBLAS_LIBRARY} DIRECTORY)
  target_link_options(strata_openblas INTERFACE "-Wl,-rpath,${_openblas_dir}")
else()
  message(STATUS "strata: OpenBLAS OFF (CPU matrix products through Eigen's own GEMM)")
endif()

# libsodium (libsodium-dev): HMAC-SHA256, the CSPRNG and the Curve25519 keys of job
# authentication (distribute/job_secret.h, docs/SECURITY.md). Not optional: every
# multi-process job authenticates. scripts/gpu-carry.sh carries its headers and static
# library for machines without it (PATHS: searched after the system's own directories).
find_path(SODIUM_INCLUDE_DIR sodium.h PATHS ${STRATA_CARRY_DIR}/include)
find_library(SODIUM_LIBRARY NAMES sodium PATHS ${STRATA_CARRY_DIR}/lib)
if(NOT SODIUM_INCLUDE_DIR OR NOT SODIUM_LIBRARY)
  message(FATAL_ERROR "strata: libsodium not found on the system (scripts/install-deps.sh installs "
                      "libsodium-dev) nor in ${STRATA_CARRY_DIR} (scripts/gpu-carry.sh)")
endif()
add_library(strata_sodium INTERFACE)
target_include_directories(strata_sodium SYSTEM INTERFACE $<BUILD_INTERFACE:${SODIUM_INCLUDE_DIR}>)
target_link_libraries(strata_sodium INTERFACE ${SODIUM_LIBRARY})

if(STRATA_BUILD_TESTS)
  strata_find_package(Catch2 2)
  include(Catch)
endif()

# strata_folder_library(name sources...): a static library for one folder of the engine,
# or an INTERFACE placeholder while the folder has no sources yet.
function(strata_folder_library name)
  if(ARGN)
    add_library(${name} STATIC ${ARGN})
    set(${name}_KIND PUBLIC PARENT_SCOPE)
  else()
    add_library(${name} INTERFACE)
    set(${name}_KIND INTERFACE PARENT_SCOPE)
  endif()
endfunction()
