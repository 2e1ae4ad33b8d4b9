# `cmake --install build --prefix P` makes strata consumable from outside its tree:
#
#   P/include/strata/{strata.h,core,autograd,data,distribute,train}/**.h  public headers
#   P/lib/libstrata_*.a                                          the engine (static)
#   P/lib/cmake/strata/strataConfig.cmake (+ Version, Targets)   find_package(strata)
#   P/lib/pkgconfig/strata.pc                                    pkg-config --cflags --libs strata
#   P/bin/strata-{train,launch,golden}                           the programs, when built
#
# The libraries are installed static, as the build makes them: the CUDA backend registers
# itself from a static object (whole-archive link, carried by strata::strata), and the
# third-party libraries they use privately (OpenBLAS, protobuf-lite, Gloo, ZeroMQ, CUDA)
# reach the consumer's link line through the exported targets, found again by the config
# file with find_dependency. The config records which optional backends this build has
# (STRATA_HAS_CUDA, STRATA_HAS_GLOO, ...; find_package(strata COMPONENTS CUDA) fails
# without them). Public headers need no generated header (strata_build_config.h and
# train/event.pb.h are internal to the libraries' sources).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)

# Public headers: every engine folder's .h files, under include/strata/ (the prefix they
# include each other through). kernels/ is internal (core/ declares what it implements).
install(FILES ${PROJECT_SOURCE_DIR}/strata.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata)
foreach(dir core autograd data distribute train)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/strata
    FILES_MATCHING PATTERN "*.h")
endforeach()

# The export set: `strata` (exported as strata::strata) and everything it links that is
# not an imported target of another package.
set(_strata_export_targets strata strata_options strata_openblas strata_sodium strata_core strata_autograd
  strata_data strata_distribute strata_train)
foreach(t strata_train_proto strata_cuda strata_cudnn strata_nccl)
  if(TARGET ${t})
    list(APPEND _strata_export_targets ${t})
  endif()
endforeach()
install(TARGETS ${_strata_export_targets} EXPORT strataTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_INSTALL_CMAKEDIR})

# The programs (OPTIONAL: a build made only for the tests may not have linked them).
foreach(program strata-train strata-launch strata-golden)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} OPTIONAL)
  endif()
endforeach()

# Where this build found the packages the config file looks for again (a carried package,
# scripts/gpu-carry.sh, is not on the default search path).
foreach(pkg Eigen3 nlohmann_json Gloo cppzmq)
  if(${pkg}_DIR)
    set(STRATA_${pkg}_HINT ${${pkg}_DIR})
  else()
    set(STRATA_${pkg}_HINT "")
  endif()
endforeach()
set(STRATA_CUDA_ROOT_HINT "")
if(STRATA_HAS_CUDA AND CUDAToolkit_BIN_DIR)
  get_filename_component(STRATA_CUDA_ROOT_HINT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
foreach(flag STRATA_HAS_CUDA STRATA_HAS_GLOO STRATA_HAS_ZMQ STRATA_HAS_OPENBLAS STRATA_HAS_PROTOBUF)
  if(${flag})
    set(${flag}_VALUE ON)
  else()
    set(${flag}_VALUE OFF)
  endif()
endforeach()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/strataConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/strataConfig.cmake INSTALL_DESTINATION ${STRATA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/strataConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/strataConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/strataConfigVersion.cmake DESTINATION ${STRATA_INSTALL_CMAKEDIR})

# strata.pc: static libraries list what they need themselves, in link order, as absolute
# paths where CMake knows them (the same files the build linked). The packages' imported
# targets belong to the folders that found them; Gloo's is imported again here to read its
# file, the others' files are in the cache.
if(STRATA_HAS_GLOO AND NOT TARGET gloo)
  find_package(Gloo CONFIG QUIET)
endif()
set(_pc_libs "-L\${libdir} -lstrata_train")
if(TARGET strata_train_proto)
  string(APPEND _pc_libs " -lstrata_train_proto ${Protobuf_LITE_LIBRARY_RELEASE}")
endif()
string(APPEND _pc_libs " -lstrata_distribute -lstrata_data -lstrata_autograd")
if(TARGET strata_cuda)
  string(APPEND _pc_libs " -Wl,--whole-archive -lstrata_cuda -Wl,--no-whole-archive")
endif()
string(APPEND _pc_libs " -lstrata_core")
if(STRATA_HAS_GLOO)
  string(APPEND _pc_libs " $<TARGET_LINKER_FILE:gloo>")
endif()
if(STRATA_HAS_ZMQ)
  string(APPEND _pc_libs " ${ZeroMQ_LIBRARY}")
endif()
if(STRATA_HAS_OPENBLAS)
  string(APPEND _pc_libs " ${OPENBLAS_LIBRARY} -Wl,-rpath,${_openblas_dir}")
endif()
if(TARGET strata_cuda)
  string(APPEND _pc_libs " $<TARGET_LINKER_FILE:CUDA::cublasLt> $<TARGET_LINKER_FILE:CUDA::cudart>")
  foreach(lib STRATA_CUDNN_LIBRARY STRATA_NCCL_LIBRARY)
    if(${lib})
      string(APPEND _pc_libs " ${${lib}}")
    endif()
  endforeach()
endif()
string(APPEND _pc_libs " ${SODIUM_LIBRARY}")  # job authentication (distribute/job_secret.h)
string(APPEND _pc_libs " -lz -pthread")
set(_pc_cflags "-I\${includedir}")
foreach(def STRATA_HAS_CUDA STRATA_HAS_GLOO STRATA_HAS_ZMQ)
  if(${def})
    string(APPEND _pc_cflags " -D${def}=1")
  endif()
endforeach()
set(STRATA_PC_LIBS "${_pc_libs}")
set(STRATA_PC_CFLAGS "${_pc_cflags}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/strata.pc.in ${CMAKE_CURRENT_BINARY_DIR}/strata.pc.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/strata.pc INPUT ${CMAKE_CURRENT_BINARY_DIR}/strata.pc.in)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/strata.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
