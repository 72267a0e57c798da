# ctest install_consumer: installs the built msa into <build>/install_check, then configures,
# builds and runs tests/install/consumer against it, as another project would.
#   cmake -DBUILD=<msa build> -DSOURCE=<msa source> -DGENERATOR=<generator> [-DCXX_FLAGS=<msa's>]
#         -P run_consumer.cmake
# The consumer gets msa's CMAKE_CXX_FLAGS: a sanitized libmsa needs the sanitizer runtime.
set(prefix ${BUILD}/install_check)
set(consumer_build ${BUILD}/install_check_consumer)
file(REMOVE_RECURSE ${prefix} ${consumer_build})
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc})\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})
foreach(f include/msa/msa.h lib/cmake/msa/msaConfig.cmake lib/cmake/msa/msaConfigVersion.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${prefix}/${f} was not installed")
  endif()
endforeach()
run("configuring the consumer" ${CMAKE_COMMAND} -S ${SOURCE}/tests/install/consumer -B ${consumer_build}
    -G ${GENERATOR} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}")
run("building the consumer" ${CMAKE_COMMAND} --build ${consumer_build})
run("running the consumer" ${consumer_build}/msa_consumer)
