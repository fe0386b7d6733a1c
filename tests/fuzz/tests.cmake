# libFuzzer harnesses (tests/fuzz/README.md): built by the fuzz_build test as a separate CMake
# project with clang++ (the main build is untouched), then each harness replays its committed
# corpus and fuzzes for LOOM_FUZZ_SECONDS. Without clang++/libFuzzer every test skips (77) with a
# message. LOOM_FUZZ=OFF leaves them out.
option(LOOM_FUZZ "Register the libFuzzer harness tests (built with clang++ at test time)" ON)
set(LOOM_FUZZ_SECONDS 3 CACHE STRING "Seconds each fuzz harness runs in ctest")
if(LOOM_FUZZ)
  set(loom_fuzz_build ${CMAKE_BINARY_DIR}/fuzz)
  add_test(NAME fuzz_build COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh build ${loom_fuzz_build})
  set_tests_properties(fuzz_build PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 FIXTURES_SETUP loom_fuzz)
  foreach(h gguf safetensors hf_config tokenizer_json llama2c llama2c_tokenizer openai_request step_codec http_request)
    add_test(NAME fuzz_${h}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run.sh run ${loom_fuzz_build} ${h} ${LOOM_FUZZ_SECONDS})
    set_tests_properties(fuzz_${h} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED loom_fuzz)
  endforeach()
endif()
