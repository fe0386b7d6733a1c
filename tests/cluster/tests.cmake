# `loom serve --tiers`: bad tiers fail at start-up in one line, before the model loads.
add_test(NAME cluster_cli_serve_bad_tiers COMMAND loom serve --model /nonexistent --tiers "a=0/10")
set_tests_properties(cluster_cli_serve_bad_tiers PROPERTIES PASS_REGULAR_EXPRESSION "tier 'a': TTFT target 0 ms must be positive")
add_test(NAME cluster_cli_serve_unknown_tier_syntax COMMAND loom serve --model /nonexistent --tiers "a=fast")
set_tests_properties(cluster_cli_serve_unknown_tier_syntax PROPERTIES PASS_REGULAR_EXPRESSION "is not TTFT_MS/TPOT_MS or background")
# `loom bench offline --tiers --tier-mix`: the mix splits requests 3:1:1 in every prefix, a tier
# whose 5 s / 0.5 s targets every request meets counts them all, a 10 us tier none.
set(loom_stories ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin)
if(EXISTS ${loom_stories})
  add_test(NAME cluster_cli_bench_offline_tiers
           COMMAND loom bench offline --model ${loom_stories} --synthetic poisson:50 -n 40 --prompt-len 32
                   --output-len 16 --threads 1 --tiers "fast=5000/500,slow=0.01/0.01,bg=background"
                   --tier-mix fast:3,slow:1,bg:1)
  set_tests_properties(cluster_cli_bench_offline_tiers PROPERTIES PASS_REGULAR_EXPRESSION
                       "tier fast +24 requests, +24 met TTFT and TPOT.*tier slow +8 requests, +0 met.*tier bg +8 requests, +0 met")
endif()
add_test(NAME cluster_cli_bench_offline_bad_mix
         COMMAND loom bench offline --model /nonexistent --synthetic batch -n 4 --tiers "a=100/10" --tier-mix b:1)
set_tests_properties(cluster_cli_bench_offline_bad_mix PROPERTIES PASS_REGULAR_EXPRESSION "unknown tier 'b' \\(known: a\\)")
# `loom serve --policy nitsum` (cluster/pool.h): bad pool options fail at start-up in one line,
# before the model loads.
add_test(NAME cluster_cli_pool_no_grouping_fits
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 3 --min-tp 2 --pool-layout both:tp2)
set_tests_properties(cluster_cli_pool_no_grouping_fits PROPERTIES PASS_REGULAR_EXPRESSION
                     "pool of 3 ranks: no grouping fits \\(the smallest TP degree the model allows is 2")
add_test(NAME cluster_cli_pool_layout_short
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --pool-layout both:tp1)
set_tests_properties(cluster_cli_pool_layout_short PROPERTIES PASS_REGULAR_EXPRESSION
                     "pool layout t0:both:tp1 covers 1 of the pool's 2 ranks")
add_test(NAME cluster_cli_pool_bad_role
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --pool-layout both:tp1,middle:tp1)
set_tests_properties(cluster_cli_pool_bad_role PROPERTIES PASS_REGULAR_EXPRESSION "instance 'middle:tp1' has role 'middle'")
add_test(NAME cluster_cli_pool_needs_profile COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2)
set_tests_properties(cluster_cli_pool_needs_profile PROPERTIES PASS_REGULAR_EXPRESSION
                     "--policy nitsum needs --profile DIR")
add_test(NAME cluster_cli_pool_bad_targets
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --pool-layout both:tp2 --tiers "a=100/-1")
set_tests_properties(cluster_cli_pool_bad_targets PROPERTIES PASS_REGULAR_EXPRESSION "tier 'a': TPOT target -1 ms must be positive")
add_test(NAME cluster_cli_pool_bad_window
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --pool-layout both:tp2 --window 0)
set_tests_properties(cluster_cli_pool_bad_window PROPERTIES PASS_REGULAR_EXPRESSION "--window: 0 is out of range \\(0, 3600\\]")
add_test(NAME cluster_cli_pool_no_prefill
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --pool-layout decode:tp1,decode:tp1)
set_tests_properties(cluster_cli_pool_no_prefill PROPERTIES PASS_REGULAR_EXPRESSION
                     "pool layout t0:decode:tp1 t0:decode:tp1 has no prefill or both instance")
# `loom serve --policy nitsum --profile DIR` on a folder `loom profile --quick` has just written:
# planned from it, greedy text equal to one rank (curl).
find_program(LOOM_CURL curl)
if(LOOM_CURL AND EXISTS ${loom_stories})
  add_test(NAME cluster_cli_pool_on_loom_profile
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_nitsum_profile.sh $<TARGET_FILE:loom> ${loom_stories})
  set_tests_properties(cluster_cli_pool_on_loom_profile PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       PASS_REGULAR_EXPRESSION "OK: the pool planned from a loom profile folder")
endif()
add_test(NAME cluster_cli_pool_profile_not_a_folder
         COMMAND loom serve --model /nonexistent --policy nitsum --ranks 2 --profile ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(cluster_cli_pool_profile_not_a_folder PROPERTIES PASS_REGULAR_EXPRESSION
                     "is not a loom profile folder \\(no hardware.json")
