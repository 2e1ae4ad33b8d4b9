# Third-party packages, all from Debian (scripts/install-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)

# OpenBLAS, pthread build: Debian's serial build is not safe when two threads call sgemm
# at once (PLATFORM.md). Link that directory explicitly rather than the libblas alternative.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread NO_DEFAULT_PATH)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (pthread build) not found: run scripts/install-deps.sh")
endif()
add_library(strata_openblas INTERFACE)
target_include_directories(strata_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(strata_openblas INTERFACE ${OPENBLAS_LIBRARY})
get_filename_component(_openblas_dir ${OPENBLAS_LIBRARY} DIRECTORY)
target_link_options(strata_openblas INTERFACE "-Wl,-rpath,${_openblas_dir}")

if(STRATA_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
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
