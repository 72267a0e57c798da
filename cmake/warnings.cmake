# Warnings for host code; CUDA sources get ptxas spill warnings from the main list.
function(msa_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wno-unknown-pragmas>)
endfunction()
