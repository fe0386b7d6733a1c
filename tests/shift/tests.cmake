# MPI runs of the layout policies: Shift Parallelism (the plan set {sp x tp, its shift config}),
# plan sets switching placements (cycle:N, KV migrated), and Helix plans (HOP-B on and off): `loom generate --plan sp=S,tp=T
# --policy shift|alternate|random:SEED --comm mpi` under mpirun against single-rank generation,
# on stories260K and on the synthetic GQA model (24 query heads, 6 KV heads) written by
# `loom synth`, checked by tests/dist/mpi_generate.sh (mpirun flags: tests/CMakeLists.txt).
if(LOOM_MPI)
  set(loom_shift_gqa ${CMAKE_CURRENT_BINARY_DIR}/shift_gqa_24x6_f32.gguf)
  add_test(NAME shift_mpi_synth_gqa_model
           COMMAND $<TARGET_FILE:loom> synth --shape gqa-24x6 --dtype f32 --seed 7 -o ${loom_shift_gqa})
  set_tests_properties(shift_mpi_synth_gqa_model PROPERTIES FIXTURES_SETUP shift_gqa TIMEOUT 60)
  set(loom_shift_stories ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin)
  # name, ranks, plan, policy
  set(loom_shift_stories_runs "sp2tp2_shift 4 sp=2,tp=2 shift" "sp2tp2_random 4 sp=2,tp=2 random:3"
                              "sp4tp1_alternate 4 sp=4,tp=1 alternate"
                              "set_tp4_dp2tp2_dp4_cycle2 4 tp=4/dp=2,tp=2/dp=4 cycle:2"
                              "set_tp2_pp2_cycle1 2 tp=2/pp=2,layers=3+2 cycle:1"
                              "helix_kvp2tpa2 4 kvp=2,tpa=2 fixed" "helix_kvp4_hopb_off 4 kvp=4,tpa=1,hopb=off fixed"
                              "set_tp4_helix_cycle2 4 tp=4/kvp=2,tpa=2 cycle:2")
  loom_mpi_generate_tests(PREFIX shift_mpi_stories_ MODEL ${loom_shift_stories} TOKENS 24 SKIP_RETURN_CODE 77
                          RUNS ${loom_shift_stories_runs})
  set(loom_shift_gqa_runs "sp2tp1_shift 2 sp=2,tp=1 shift" "sp3tp2_random 6 sp=3,tp=2 random:5"
                          "set_tp4_dp4_cycle3 4 tp=4/dp=4/dp=2,tp=2 cycle:3"
                          "helix_kvp2tpa3 6 kvp=2,tpa=3 fixed")
  loom_mpi_generate_tests(PREFIX shift_mpi_gqa_ MODEL ${loom_shift_gqa} TOKENS 8 FIXTURE shift_gqa
                          RUNS ${loom_shift_gqa_runs})
endif()
