# STRATA_CUDA=AUTO|ON|OFF. AUTO builds the CUDA backend when nvcc is found. The built
# library still runs without a GPU; CUDA tests report themselves skipped there.
#
# The CUDA backend (kernels/cuda) is not written yet: AUTO then builds the CPU library
# only (and says so), ON fails, so no build ever promises kernels it does not have.
set(STRATA_HAS_CUDA OFF)
if(NOT STRATA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  set(_strata_cuda_backend ${PROJECT_SOURCE_DIR}/kernels/cuda/CMakeLists.txt)
  if(CMAKE_CUDA_COMPILER AND EXISTS ${_strata_cuda_backend})
    set(STRATA_HAS_CUDA ON)
  elseif(STRATA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "STRATA_CUDA=ON, but the CUDA backend is not part of this source tree yet "
                        "(kernels/cuda) or no CUDA compiler was found")
  elseif(CMAKE_CUDA_COMPILER)
    message(STATUS "strata: CUDA toolkit found, but the CUDA backend is not built yet (CPU only)")
  endif()
endif()
message(STATUS "strata: CUDA backend ${STRATA_HAS_CUDA}")
