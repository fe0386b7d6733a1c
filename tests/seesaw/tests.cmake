# MPI runs of Seesaw's pieces (issue 13): pipeline plans (even and uneven stages, with TP) under
# mpirun against single-rank generation, checked by tests/dist/mpi_generate.sh, on stories260K
# (5 layers: uneven stages) and on a 4-layer synthetic model written by `loom synth` (even stages).
if(LOOM_MPI)
  set(loom_seesaw_synth ${CMAKE_CURRENT_BINARY_DIR}/seesaw_4layer_f32.gguf)
  add_test(NAME seesaw_mpi_synth_model
           COMMAND $<TARGET_FILE:loom> synth --dims d=64,layers=4,heads=8,kv_heads=2,head_dim=8,ffn=128,vocab=512,ctx=1024
                   --dtype f32 --seed 13 -o ${loom_seesaw_synth})
  set_tests_properties(seesaw_mpi_synth_model PROPERTIES FIXTURES_SETUP seesaw_synth TIMEOUT 60)
  set(loom_seesaw_stories ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin)
  # name, ranks, plan (plans of a set separated by '/'), policy
  foreach(entry "pp2_uneven 2 pp=2,layers=1+4 fixed" "pp4_uneven 4 pp=4,layers=2+1+1+1 fixed"
                "tp2pp2_uneven 4 tp=2,pp=2,layers=3+2 fixed")
    separate_arguments(parts UNIX_COMMAND "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 plan)
    list(GET parts 3 policy)
    add_test(NAME seesaw_mpi_stories_${name}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/dist/mpi_generate.sh $<TARGET_FILE:loom> ${loom_seesaw_stories}
                     ${np} ${plan} 24 ${policy} ${loom_mpirun})
    set_tests_properties(seesaw_mpi_stories_${name} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
  foreach(entry "pp2 2 pp=2 fixed" "pp4 4 pp=4 fixed" "tp2pp2 4 tp=2,pp=2 fixed")
    separate_arguments(parts UNIX_COMMAND "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 plan)
    list(GET parts 3 policy)
    add_test(NAME seesaw_mpi_synth_${name}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/dist/mpi_generate.sh $<TARGET_FILE:loom> ${loom_seesaw_synth}
                     ${np} ${plan} 12 ${policy} ${loom_mpirun})
    set_tests_properties(seesaw_mpi_synth_${name} PROPERTIES TIMEOUT 120 FIXTURES_REQUIRED seesaw_synth
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
endif()
if(LOOM_MPI)
  # Seesaw's phase plans under mpirun: prefill under pp=2, decode under tp=2, the KV through the
  # CPU tier (one MPI shared-memory window on this host) of 64 tokens of stories260K's KV
  # (1280 bytes a token): the 4 short prompts fill it at least twice (>= 3 transitions).
  foreach(entry "pp2_tp2 2 pp=2,layers=3+2/tp=2 seesaw:81920" "tp2pp2_tp4 4 tp=2,pp=2,layers=2+3/tp=4 seesaw:81920")
    separate_arguments(parts UNIX_COMMAND "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 np)
    list(GET parts 2 plan)
    list(GET parts 3 policy)
    add_test(NAME seesaw_mpi_phases_${name}
             COMMAND sh ${CMAKE_SOURCE_DIR}/tests/dist/mpi_generate.sh $<TARGET_FILE:loom> ${loom_seesaw_stories}
                     ${np} ${plan} 24 ${policy} ${loom_mpirun})
    set_tests_properties(seesaw_mpi_phases_${name} PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
endif()
