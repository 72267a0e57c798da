# ctest fuzz_api_bounded: copies the seed corpus (the committed seeds stay untouched) and runs
# the fuzzer on the copy for SECONDS. Fails on any finding; the input lands in WORK/artifacts/.
# Variables: FUZZER, CORPUS, DICT, WORK, SECONDS.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
file(GLOB seeds "${CORPUS}/*")
file(COPY ${seeds} DESTINATION "${WORK}/corpus")
set(ENV{ASAN_OPTIONS} "abort_on_error=0:detect_leaks=1:allocator_may_return_null=0")
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")
execute_process(
  COMMAND "${FUZZER}" -max_total_time=${SECONDS} -rss_limit_mb=2048 -malloc_limit_mb=2048
          -timeout=20 -max_len=256 -len_control=0 -print_final_stats=1 -dict=${DICT}
          -artifact_prefix=${WORK}/artifacts/
          "${WORK}/corpus"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found "${WORK}/artifacts/*")
  message(FATAL_ERROR "fuzz_api_bounded: the fuzzer failed (exit ${rc}); input(s): ${found}\n"
                      "reproduce: ${FUZZER} <input>")
endif()
message(STATUS "fuzz_api_bounded: no finding in ${SECONDS} s")
