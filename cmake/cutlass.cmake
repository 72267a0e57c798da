# The pinned CUTLASS/CuTe headers. Order of preference:
#   1. -DMSA_CUTLASS_DIR=<folder with cute/ and cutlass/>  (machines without network)
#   2. -DMSA_CUTLASS_WHEEL=<nvidia_cutlass-*.whl>           (a wheel carried by hand)
#   3. pip download nvidia-cutlass==${MSA_CUTLASS_VERSION} by package name, cached in the
#      build tree so later configures do not download again.
function(msa_get_cutlass out_var)
  if(MSA_CUTLASS_DIR)
    if(NOT EXISTS "${MSA_CUTLASS_DIR}/cute/tensor.hpp")
      message(FATAL_ERROR "MSA_CUTLASS_DIR=${MSA_CUTLASS_DIR} does not hold cute/tensor.hpp")
    endif()
    set(${out_var} "${MSA_CUTLASS_DIR}" PARENT_SCOPE)
    return()
  endif()

  set(root "${CMAKE_BINARY_DIR}/_deps/cutlass-${MSA_CUTLASS_VERSION}")
  set(include_dir "${root}/cutlass_library/source/include")
  if(NOT EXISTS "${include_dir}/cute/tensor.hpp")
    set(wheel "${MSA_CUTLASS_WHEEL}")
    if(NOT wheel)
      find_package(Python3 REQUIRED COMPONENTS Interpreter)
      message(STATUS "msa: downloading nvidia-cutlass==${MSA_CUTLASS_VERSION} with pip")
      execute_process(
        COMMAND ${Python3_EXECUTABLE} -m pip download --no-deps --quiet
                --dest "${root}/wheel" "nvidia-cutlass==${MSA_CUTLASS_VERSION}"
        RESULT_VARIABLE rc)
      file(GLOB wheel "${root}/wheel/nvidia_cutlass-*.whl")
      if(NOT rc EQUAL 0 OR NOT wheel)
        message(FATAL_ERROR "msa: pip could not download nvidia-cutlass==${MSA_CUTLASS_VERSION} (no network?); "
                            "pass -DMSA_CUTLASS_DIR=<folder with cute/ and cutlass/> or "
                            "-DMSA_CUTLASS_WHEEL=<nvidia_cutlass wheel> (scripts/prepare_offline.sh fetches it "
                            "on a machine with network), or build the CPU backend alone: "
                            "cmake --preset cpu (-DMSA_ENABLE_CUDA=OFF)")
      endif()
    endif()
    message(STATUS "msa: unpacking ${wheel}")
    file(ARCHIVE_EXTRACT INPUT "${wheel}" DESTINATION "${root}"
         PATTERNS "cutlass_library/source/include/*")
  endif()
  if(NOT EXISTS "${include_dir}/cute/tensor.hpp")
    message(FATAL_ERROR "msa: no CUTLASS headers under ${include_dir}")
  endif()
  set(${out_var} "${include_dir}" PARENT_SCOPE)
endfunction()
