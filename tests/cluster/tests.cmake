# `loom serve --tiers`: bad tiers fail at start-up in one line, before the model loads.
add_test(NAME cluster_cli_serve_bad_tiers COMMAND loom serve --model /nonexistent --tiers "a=0/10")
set_tests_properties(cluster_cli_serve_bad_tiers PROPERTIES PASS_REGULAR_EXPRESSION "tier 'a': TTFT target 0 ms must be positive")
add_test(NAME cluster_cli_serve_unknown_tier_syntax COMMAND loom serve --model /nonexistent --tiers "a=fast")
set_tests_properties(cluster_cli_serve_unknown_tier_syntax PROPERTIES PASS_REGULAR_EXPRESSION "is not TTFT_MS/TPOT_MS or background")
