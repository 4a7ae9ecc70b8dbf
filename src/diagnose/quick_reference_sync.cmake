# ctest diagnose_quick_reference_sync: docs/quick-reference.md must be what
# `trainscope diagnose --rules-doc` generates from the bundled rules.
#   cmake -DTRAINSCOPE=<binary> -DDOC=<docs/quick-reference.md> -DOUT=<scratch file> -P this
execute_process(COMMAND ${TRAINSCOPE} diagnose --rules-doc OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainscope diagnose --rules-doc failed (exit ${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${DOC} ${OUT} RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
  message(FATAL_ERROR "docs/quick-reference.md is out of date with data/diagnose/rules.json; "
    "regenerate it: build/bin/trainscope diagnose --rules-doc > docs/quick-reference.md")
endif()
