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
