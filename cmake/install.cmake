# `cmake --install <build> [--prefix <dir>]`: the public headers, libmsa, and a CMake package
# (msaConfig.cmake, msaConfigVersion.cmake, msaTargets.cmake) so that another project writes
#   find_package(msa 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE msa::msa)
# tests/install/ builds such a consumer against the installed tree (ctest: install_consumer).
include(CMakePackageConfigHelpers)

set(MSA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/msa)
install(TARGETS msa EXPORT msaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/msa DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT msaTargets NAMESPACE msa:: DESTINATION ${MSA_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/msaConfig.cmake.in ${PROJECT_BINARY_DIR}/msaConfig.cmake
                              INSTALL_DESTINATION ${MSA_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/msaConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/msaConfig.cmake ${PROJECT_BINARY_DIR}/msaConfigVersion.cmake
        DESTINATION ${MSA_INSTALL_CMAKEDIR})
