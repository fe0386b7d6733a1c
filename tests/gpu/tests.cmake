# test_gpu also runs the communicator checks of tests/comm on the shared-GPU and NCCL backends.
if(TARGET test_gpu)
  target_sources(test_gpu PRIVATE ${CMAKE_CURRENT_LIST_DIR}/../comm/checks.cpp)
  loom_use_cuda(test_gpu)
endif()
# The engine's plans on the CUDA device (test_gpu_engine.cpp) need the engine layer.
if(TARGET test_gpu)
  target_link_libraries(test_gpu PRIVATE loom_engine)
endif()
