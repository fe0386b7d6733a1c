# Interop: Hugging Face's GGUF parser (npm @huggingface/gguf) opens what `loom synth` writes, and
# Hugging Face's tokenizers (npm tokenizers, the Rust library's Node binding) load its
# tokenizer.json files and encode like `loom tokenize`.
find_program(LOOM_NODE node)
find_program(LOOM_NPM npm)
if(LOOM_NODE AND LOOM_NPM)
  set(loom_interop_dir ${CMAKE_BINARY_DIR}/model-interop-node)
  add_test(NAME model_interop_setup
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/interop/setup.sh ${CMAKE_CURRENT_LIST_DIR}/interop ${loom_interop_dir})
  set_tests_properties(model_interop_setup PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 FIXTURES_SETUP model_interop)
  add_test(NAME model_interop_gguf
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/interop/run.sh $<TARGET_FILE:loom> ${loom_interop_dir}
                   ${CMAKE_CURRENT_BINARY_DIR}/model-interop-work)
  set_tests_properties(model_interop_gguf PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED model_interop)
  add_test(NAME model_interop_tokenizer
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/interop/run_tokenizer.sh $<TARGET_FILE:loom> ${loom_interop_dir}
                   ${CMAKE_CURRENT_BINARY_DIR}/model-interop-tokenizer-work)
  set_tests_properties(model_interop_tokenizer PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED model_interop)
endif()
