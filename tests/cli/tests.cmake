# Terminal manners (issue 19): no progress bars into pipes (`loom sim run`, `loom plan`), and
# `--tokenizer` on `loom bench offline` like every subcommand that takes a model file.
add_test(NAME cli_terminal_manners
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/terminal_manners.sh $<TARGET_FILE:loom>
                 ${CMAKE_SOURCE_DIR}/../shared/models/stories260K)
set_tests_properties(cli_terminal_manners PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
