# LOOM_KERNELS forces a lower kernel path: the dispatch test alone in a fresh process per value.
foreach(path scalar avx2)
  add_test(NAME kernels_env_${path}
           COMMAND test_kernels --gtest_filter=KernelsDispatch.EnvChoosesPath)
  set_tests_properties(kernels_env_${path} PROPERTIES
                       ENVIRONMENT "LOOM_KERNELS=${path};LOOM_TEST_EXPECT_PATH=${path}")
endforeach()

# LOOM_NUMERICS sets the fast/exact default: the test alone in a fresh process per value.
foreach(mode exact fast)
  add_test(NAME kernels_numerics_env_${mode}
           COMMAND test_kernels --gtest_filter=KernelsMatmulFast.EnvSetsTheDefault)
  set_tests_properties(kernels_numerics_env_${mode} PROPERTIES
                       ENVIRONMENT "LOOM_NUMERICS=${mode};LOOM_TEST_EXPECT_NUMERICS=${mode}")
endforeach()
