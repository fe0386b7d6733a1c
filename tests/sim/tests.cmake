# CLI-level checks of `loom sim` (the library is covered by test_sim).
add_test(NAME sim_cli_experiment_list COMMAND loom sim experiment --list)
set_tests_properties(sim_cli_experiment_list PROPERTIES PASS_REGULAR_EXPRESSION "shift-4.3.1")
add_test(NAME sim_cli_experiment_json COMMAND loom sim experiment shift-4.3.1 --json)
set_tests_properties(sim_cli_experiment_json PROPERTIES PASS_REGULAR_EXPRESSION "\"experiment\": \"shift-4.3.1\"")
add_test(NAME sim_cli_bad_plan COMMAND loom sim run --plan tp=3 --synthetic poisson:1 --num-requests 7 --quiet)
set_tests_properties(sim_cli_bad_plan PROPERTIES WILL_FAIL TRUE)
# `loom profile --comm mpi` under mpirun, and the simulator pricing with the MPI collectives.
if(LOOM_MPI)
  add_test(NAME sim_mpi_profile
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_profile.sh $<TARGET_FILE:loom> ${loom_mpirun})
  set_tests_properties(sim_mpi_profile PROPERTIES TIMEOUT 120 ENVIRONMENT "${loom_mpi_env}"
                       PASS_REGULAR_EXPRESSION "mpi profile ok")
endif()
# SiDP experiments (issue 14): they run and name themselves.
foreach(e sidp-fig5 sidp-fig11 sidp-headline)
  add_test(NAME sim_cli_experiment_${e} COMMAND loom sim experiment ${e} --json)
  set_tests_properties(sim_cli_experiment_${e} PROPERTIES PASS_REGULAR_EXPRESSION "\"experiment\": \"${e}\"")
endforeach()
