# STRATA_CUDA=AUTO|ON|OFF. AUTO builds the CUDA backend (kernels/cuda) when nvcc is found;
# ON fails without it. The built library still runs without a GPU: `cuda:N` then raises a
# strata::Error, and CUDA tests report themselves skipped.
#
# STRATA_CUDA_EMULATION (independent of STRATA_CUDA): builds the g++ test target that
# compiles the hand-written kernel bodies (kernels/cuda/*.cuh) against
# tests/cuda_emulation/cuda_emu.h and runs them on the CPU. It needs only the toolkit's
# headers (cuda_fp16.h, cuda_bf16.h), not nvcc or a GPU.
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
    message(FATAL_ERROR "STRATA_CUDA=ON, but no CUDA compiler was found (set CMAKE_CUDA_COMPILER "
                        "or put nvcc on PATH)")
  endif()
endif()

if(STRATA_HAS_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "80;90")  # A100, H100/H200
  endif()
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # else the link line gets both cudart flavours
  enable_language(CUDA)
  # C++20 in CUDA: CMake 3.25 knows no CUDA20 flags for nvcc, and CMAKE_CUDA_STANDARD 20
  # alone fails to configure or silently compiles C++17 (PLATFORM.md; fixed in 3.26). Set
  # after enable_language, whose compiler checks would otherwise ask for the dialect first.
  if(CMAKE_VERSION VERSION_LESS 3.26)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
  # cuDNN and NCCL ship no CMake targets; found next to the toolkit (or set by hand, e.g.
  # to the nvidia-cudnn-cu13 / nvidia-nccl-cu13 wheels on a machine that has only those).
  find_path(STRATA_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(STRATA_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(STRATA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(STRATA_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(STRATA_CUDNN_INCLUDE_DIR AND STRATA_CUDNN_LIBRARY)
    add_library(strata_cudnn INTERFACE)
    target_include_directories(strata_cudnn SYSTEM INTERFACE ${STRATA_CUDNN_INCLUDE_DIR})
    target_link_libraries(strata_cudnn INTERFACE ${STRATA_CUDNN_LIBRARY})
  endif()
  if(STRATA_NCCL_INCLUDE_DIR AND STRATA_NCCL_LIBRARY)
    add_library(strata_nccl INTERFACE)
    target_include_directories(strata_nccl SYSTEM INTERFACE ${STRATA_NCCL_INCLUDE_DIR})
    target_link_libraries(strata_nccl INTERFACE ${STRATA_NCCL_LIBRARY})
  endif()
  message(STATUS "strata: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}; cuDNN ${STRATA_CUDNN_LIBRARY}; NCCL ${STRATA_NCCL_LIBRARY})")
else()
  message(STATUS "strata: CUDA backend OFF")
endif()

# The emulation tests need the toolkit's half/bfloat16 headers only. They are built in the
# normal and the ThreadSanitizer builds (CI runs them there); the AddressSanitizer build
# would only compile them, so it leaves them out unless asked.
if(STRATA_SANITIZE MATCHES "address")
  set(_strata_emulation_default OFF)
else()
  set(_strata_emulation_default ON)
endif()
option(STRATA_CUDA_EMULATION "Build the CUDA emulation tests (g++, no GPU needed) when the CUDA headers exist"
       ${_strata_emulation_default})
set(STRATA_HAS_CUDA_EMULATION OFF)
if(STRATA_CUDA_EMULATION)
  find_path(STRATA_CUDA_EMU_INCLUDE_DIR cuda_fp16.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(STRATA_CUDA_EMU_INCLUDE_DIR)
    set(STRATA_HAS_CUDA_EMULATION ON)
  else()
    message(STATUS "strata: CUDA headers not found: the CUDA emulation tests are not built")
  endif()
endif()
