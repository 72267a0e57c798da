# CTest helper for the msa command: runs MSA with ARGS (one space-separated string) and
# requires exit code EXIT and stdout + stderr matching the regex EXPECT; with ONE_LINE, stderr
# must be exactly one line and stdout empty (how usage errors are reported).
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND "${MSA}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL EXIT)
  message(FATAL_ERROR "msa ${ARGS}: exit code ${rc}, expected ${EXIT}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "msa ${ARGS}: output does not match '${EXPECT}'")
endif()
if(ONE_LINE AND (NOT out STREQUAL "" OR NOT err MATCHES "^[^\n]+\n$"))
  message(FATAL_ERROR "msa ${ARGS}: expected one line on stderr and nothing on stdout")
endif()
