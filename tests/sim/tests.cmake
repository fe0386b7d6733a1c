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
# Nitsum experiments (issue 15): registered and runnable.
add_test(NAME sim_cli_nitsum_list COMMAND loom sim experiment --list)
set_tests_properties(sim_cli_nitsum_list PROPERTIES PASS_REGULAR_EXPRESSION "nitsum-fig14")
add_test(NAME sim_cli_nitsum_fig7 COMMAND loom sim experiment nitsum-fig7 --json)
set_tests_properties(sim_cli_nitsum_fig7 PROPERTIES PASS_REGULAR_EXPRESSION "\"experiment\": \"nitsum-fig7\"")
# Helix (issue 12): a Helix plan simulated end to end, its experiments listed, `loom plan --context`.
add_test(NAME sim_cli_helix_run
         COMMAND loom sim run --model llama-3-70b --hardware h200x8 --plan kvp=2,tpa=2 --synthetic poisson:1
                 --num-requests 7 --quiet)
set_tests_properties(sim_cli_helix_run PROPERTIES PASS_REGULAR_EXPRESSION "kvp=2,tpa=2")
add_test(NAME sim_cli_helix_experiments COMMAND loom sim experiment --list)
set_tests_properties(sim_cli_helix_experiments PROPERTIES PASS_REGULAR_EXPRESSION "helix-fig1.*helix-fig5.*helix-fig6.*helix-fig7")
add_test(NAME sim_cli_plan_context
         COMMAND loom plan --model llama-3-405b --hardware gb200x64 --dtype fp4 --context 1000000)
set_tests_properties(sim_cli_plan_context PROPERTIES PASS_REGULAR_EXPRESSION "kvp=[0-9]+,tpa=[0-9]+")
# SiDP experiments (issues 14, 31): the cheap ones run and name themselves here (sanitized); the
# simulated jobs run in test_sim's SidpExperiments.* (Release); sidp-headline (nine cells, about 45
# jobs) is reported, not gated (tests/sim/sidp_bands.h), and runs in no test.
foreach(e sidp-fig5 sidp-fig9 sidp-fig11 sidp-kv)
  add_test(NAME sim_cli_experiment_${e} COMMAND loom sim experiment ${e} --json)
  set_tests_properties(sim_cli_experiment_${e} PROPERTIES PASS_REGULAR_EXPRESSION "\"experiment\": \"${e}\"")
endforeach()
# Seesaw (issue 13): its experiments listed (they run in test_sim: SeesawFig10/13/14, minutes of CPU).
add_test(NAME sim_cli_seesaw_experiments COMMAND loom sim experiment --list)
set_tests_properties(sim_cli_seesaw_experiments PROPERTIES PASS_REGULAR_EXPRESSION "seesaw-fig10.*seesaw-fig13.*seesaw-fig14")
# ctest -j starts the long paper-figure simulations of test_sim first (COST, tests/sim/test_costs.cmake).
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${CMAKE_CURRENT_LIST_DIR}/test_costs.cmake)
add_test(NAME sim_costs_name_existing_tests
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/check_costs.sh $<TARGET_FILE:test_sim> ${CMAKE_CURRENT_LIST_DIR}/test_costs.cmake)
set_tests_properties(sim_costs_name_existing_tests PROPERTIES PASS_REGULAR_EXPRESSION "costs name existing tests")
