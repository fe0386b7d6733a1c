# MPI runs of the distributed engine (engine/dist_engine.h): `loom generate --comm mpi` under
# mpirun for every executed plan, on stories260K and on a synthetic GQA model (24 query heads,
# 6 KV heads, f32) written by `loom synth`, compared with single-rank generation by
# mpi_generate.sh (mpirun flags: tests/CMakeLists.txt).
if(LOOM_MPI)
  set(loom_dist_gqa ${CMAKE_CURRENT_BINARY_DIR}/dist_gqa_24x6_f32.gguf)
  add_test(NAME dist_mpi_synth_gqa_model
           COMMAND $<TARGET_FILE:loom> synth --shape gqa-24x6 --dtype f32 --seed 7 -o ${loom_dist_gqa})
  set_tests_properties(dist_mpi_synth_gqa_model PROPERTIES FIXTURES_SETUP dist_gqa TIMEOUT 60)
  set(loom_dist_stories ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin)
  # name, ranks, plan
  set(loom_dist_plans "tp1 1 tp=1" "tp2 2 tp=2" "tp4 4 tp=4" "tp8 8 tp=8" "dp2 2 dp=2" "dp2tp2 4 dp=2,tp=2")
  loom_mpi_generate_tests(PREFIX dist_mpi_stories_ MODEL ${loom_dist_stories} TOKENS 24 SKIP_RETURN_CODE 77
                          RUNS ${loom_dist_plans})
  loom_mpi_generate_tests(PREFIX dist_mpi_gqa_ MODEL ${loom_dist_gqa} TOKENS 8 FIXTURE dist_gqa RUNS ${loom_dist_plans})
  # Faults under MPI: a plan that does not divide the model, and a rank count that does not match
  # the plan, end the job with the message (never a hang). The fault runs use the synthetic model,
  # so they run without ../shared.
  add_test(NAME dist_mpi_fault_bad_layout
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/comm/mpi/expect_failure.sh 60 "tp=5 does not divide num_attention_heads=24"
                   ${loom_mpirun} -np 5 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa} -n 4 --plan tp=5 --comm mpi)
  add_test(NAME dist_mpi_fault_rank_count
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/comm/mpi/expect_failure.sh 60 "plan tp=4 needs 4 ranks, but the mpi world has 2"
                   ${loom_mpirun} -np 2 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa} -n 4 --plan tp=4 --comm mpi)
  set_tests_properties(dist_mpi_fault_bad_layout dist_mpi_fault_rank_count PROPERTIES TIMEOUT 90
                       FIXTURES_REQUIRED dist_gqa ENVIRONMENT "${loom_mpi_env}")
endif()
if(LOOM_MPI)
  # Ranks started with different plans (mpirun MPMD form): every rank reports the disagreement.
  add_test(NAME dist_mpi_fault_plan_disagreement
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/comm/mpi/expect_failure.sh 60 "ranks disagree on the plans: rank\\(s\\) 0 have .tp=2.; rank\\(s\\) 1 have .dp=2."
                   ${loom_mpirun} -np 1 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa} -n 4 --plan tp=2 --comm mpi
                   : -np 1 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa} -n 4 --plan dp=2 --comm mpi)
  set_tests_properties(dist_mpi_fault_plan_disagreement PROPERTIES TIMEOUT 90 FIXTURES_REQUIRED dist_gqa
                       ENVIRONMENT "${loom_mpi_env}")
endif()
if(LOOM_MPI)
  # One rank cannot read the model (MPMD: rank 1 is given a missing file): the job ends with that
  # rank's error instead of hanging the others.
  add_test(NAME dist_mpi_fault_unreadable_model
           COMMAND sh ${CMAKE_SOURCE_DIR}/tests/comm/mpi/expect_failure.sh 60 "rank 1 failed: .*gguf.missing"
                   ${loom_mpirun} -np 1 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa} -n 4 --plan tp=2 --comm mpi
                   : -np 1 $<TARGET_FILE:loom> generate -m ${loom_dist_gqa}.missing -n 4 --plan tp=2 --comm mpi)
  set_tests_properties(dist_mpi_fault_unreadable_model PROPERTIES TIMEOUT 90 FIXTURES_REQUIRED dist_gqa
                       ENVIRONMENT "${loom_mpi_env}")
endif()
if(LOOM_MPI)
  # `loom bench offline` under mpirun (tp and Shift plans): same counts as one rank.
  foreach(entry "tp2 2 tp=2 fixed" "sp2shift 2 sp=2 shift")
    separate_arguments(parts UNIX_COMMAND "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 plan)
    list(GET parts 3 policy)
    add_test(NAME dist_mpi_bench_offline_${name}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_bench_offline.sh $<TARGET_FILE:loom> ${loom_dist_gqa} ${np} ${plan} ${policy}
                     ${CMAKE_CURRENT_BINARY_DIR}/mpi-bench-${name} ${loom_mpirun})
    set_tests_properties(dist_mpi_bench_offline_${name} PROPERTIES TIMEOUT 120 FIXTURES_REQUIRED dist_gqa
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
endif()
if(LOOM_MPI)
  # Multi-host MPI for real (issue 19): two network namespaces joined by a veth pair, mpirun
  # launching the second host's daemon through an agent that enters its namespace; TP and Shift
  # plans across the hosts against one rank, then a rank killed on the second host. Skips (77)
  # where namespaces cannot be created (not root, no CAP_NET_ADMIN) or without ../shared.
  add_test(NAME dist_mpi_two_hosts_netns
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/netns_mpi.sh $<TARGET_FILE:loom> ${loom_dist_stories} ${loom_mpirun})
  set_tests_properties(dist_mpi_two_hosts_netns PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${loom_mpi_env};LOOM_COMM_TIMEOUT_S=20")
endif()
if(LOOM_MPI)
  # Distributed generate streams its text (issue 19, defect 14): text is on stdout while the job
  # runs, and survives a rank killed mid-run.
  add_test(NAME dist_mpi_generate_streams
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi_generate_streams.sh $<TARGET_FILE:loom> ${loom_dist_stories} ${loom_mpirun})
  set_tests_properties(dist_mpi_generate_streams PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${loom_mpi_env}")
  # SiDP (issue 14) under mpirun: weight-as-a-service (one-sided MPI_Get from the owner's RMA
  # window by a prefetch thread; peak shifting at D >= 3) and compute-as-a-service (rows to the
  # owner and back), greedy ids equal to single-rank generation. The GQA model has 2 layers, so it
  # runs D = 2 only (D > layers is rejected).
  loom_mpi_generate_tests(PREFIX dist_mpi_stories_ MODEL ${loom_dist_stories} TOKENS 24 SKIP_RETURN_CODE 77
                          RUNS "sidp2 2 dp=2,weights=owner" "sidp3 3 dp=3,weights=owner" "sidp4 4 dp=4,weights=owner"
                               "sidp3cas 3 dp=3,weights=owner,sidp=cas" "sidp4cas 4 dp=4,weights=owner,sidp=cas")
  loom_mpi_generate_tests(PREFIX dist_mpi_gqa_ MODEL ${loom_dist_gqa} TOKENS 8 FIXTURE dist_gqa
                          RUNS "sidp2 2 dp=2,weights=owner" "sidp2cas 2 dp=2,weights=owner,sidp=cas")
endif()
if(LOOM_MPI AND TARGET loom_engine)
  # SiDP replicas under mpirun (tests/dist/mpi/sidp_main.cpp): under WaS each process steps its own
  # replica (uneven load: the fast replicas finish without waiting for the slow one, then idle past
  # the communicator's timeout), and --policy sidp across WaS -> CaS -> WaS; single-rank tokens.
  add_executable(test_sidp_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/sidp_main.cpp ${CMAKE_SOURCE_DIR}/tests/test_util.cpp)
  target_include_directories(test_sidp_mpi PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(test_sidp_mpi PRIVATE loom_engine GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_sidp_mpi PRIVATE LOOM_SHARED_DIR="${CMAKE_SOURCE_DIR}/../shared"
                             LOOM_BIN="$<TARGET_FILE:loom>" LOOM_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  foreach(np 2 3)
    add_test(NAME dist_mpi_sidp_uneven_np${np}
             COMMAND ${loom_mpirun} -np ${np} $<TARGET_FILE:test_sidp_mpi> --gtest_filter=SidpMpi.Uneven*)
    add_test(NAME dist_mpi_sidp_policy_np${np}
             COMMAND ${loom_mpirun} -np ${np} $<TARGET_FILE:test_sidp_mpi> --gtest_filter=SidpMpi.Policy*)
    set_tests_properties(dist_mpi_sidp_uneven_np${np} dist_mpi_sidp_policy_np${np} PROPERTIES TIMEOUT 180
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
endif()
