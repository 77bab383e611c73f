# Install rules of the runtime: a prefix with lib/libtte_runtime.so, bin/tte_run, include/tte/*.h and
# lib/cmake/tte_runtime/ (tte_runtimeConfig.cmake, its version file and the exported target
# tte::tte_runtime), so a C++ application can
#   find_package(tte_runtime CONFIG REQUIRED)   # CMAKE_PREFIX_PATH=<prefix>
#   target_link_libraries(app PRIVATE tte::tte_runtime)
# The Python package ships such a prefix as torch_tensorrt_ext/_lib (a wheel build installs this
# component there: pyproject's [tool.scikit-build]); a checkout's copy is made by
#   cmake --install build --prefix src/torch_tensorrt_ext/_lib --component tte_runtime
# With -DTTE_PACKAGE_PREFIX=<dir> (scripts/build_runtime.sh passes src/torch_tensorrt_ext/_lib)
# every build of tte_runtime installs that component there again, so the package's copy never
# lags the build tree's.
include(CMakePackageConfigHelpers)

set(TTE_RUNTIME_VERSION 0.1.0)
set(TTE_PACKAGE_PREFIX "" CACHE PATH
    "Install the tte_runtime component here after each build (the Python package's _lib)")
set(_tte_cmake_dir lib/cmake/tte_runtime)

# Installed next to the executorch wheel's libraries: site-packages/torch_tensorrt_ext/_lib/lib
# -> site-packages/executorch/lib (the build tree keeps its absolute link-time runpath).
set_target_properties(tte_runtime PROPERTIES INSTALL_RPATH "\$ORIGIN/../../../executorch/lib")
# A wheel (scikit-build-core sets SKBUILD) runs on other machines: there the runpath is
# INSTALL_RPATH alone. executorch's package config makes every user of its targets
# (executorch::runtime and each component) link with -rpath $ORIGIN, $ORIGIN/../lib and the
# absolute lib/ of the executorch it was found in — for a wheel, pip's temporary build environment
# under /tmp, a path anyone could create on the user's machine, searched before the wheel's own.
# Dropped here; the build tree still finds executorch's libraries through CMake's own build
# rpath. (A checkout's _lib copy keeps them: it has no executorch beside it, and finds the venv's.)
if(SKBUILD)
  get_directory_property(_tte_imported IMPORTED_TARGETS)
  list(FILTER _tte_imported INCLUDE REGEX "^executorch::")
  foreach(_tte_et_target IN LISTS _tte_imported)
    get_target_property(_tte_et_link_options ${_tte_et_target} INTERFACE_LINK_OPTIONS)
    if(_tte_et_link_options)
      list(FILTER _tte_et_link_options EXCLUDE REGEX "^LINKER:-rpath,")
      set_target_properties(${_tte_et_target} PROPERTIES
                            INTERFACE_LINK_OPTIONS "${_tte_et_link_options}")
    endif()
  endforeach()
endif()

install(TARGETS tte_runtime EXPORT tte_runtimeTargets
        LIBRARY DESTINATION lib COMPONENT tte_runtime)
# The runner (tools/tte_run.cpp) beside it: bin/tte_run finds ../lib and the wheel's executorch.
set_target_properties(tte_run PROPERTIES
  INSTALL_RPATH "\$ORIGIN/../lib:\$ORIGIN/../../../executorch/lib")
install(TARGETS tte_run RUNTIME DESTINATION bin COMPONENT tte_runtime OPTIONAL)
# ... and its source as an example application of the package (share/tte_runtime/example).
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/tools/tte_run.cpp
              ${CMAKE_CURRENT_SOURCE_DIR}/tools/example/CMakeLists.txt
        DESTINATION share/tte_runtime/example COMPONENT tte_runtime)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/ DESTINATION include
        COMPONENT tte_runtime FILES_MATCHING PATTERN "*.h")
install(EXPORT tte_runtimeTargets NAMESPACE tte:: DESTINATION ${_tte_cmake_dir}
        COMPONENT tte_runtime)
configure_package_config_file(
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/tte_runtimeConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/tte_runtimeConfig.cmake
  INSTALL_DESTINATION ${_tte_cmake_dir})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/tte_runtimeConfigVersion.cmake
  VERSION ${TTE_RUNTIME_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tte_runtimeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/tte_runtimeConfigVersion.cmake
        DESTINATION ${_tte_cmake_dir} COMPONENT tte_runtime)

if(TTE_PACKAGE_PREFIX)
  foreach(_tte_target tte_runtime tte_run)
    add_custom_command(TARGET ${_tte_target} POST_BUILD
      COMMAND ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix ${TTE_PACKAGE_PREFIX}
              --component tte_runtime
      COMMENT "${_tte_target}: installing into ${TTE_PACKAGE_PREFIX}"
      VERBATIM)
  endforeach()
endif()
