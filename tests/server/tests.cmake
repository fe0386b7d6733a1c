# Shell-level tests of `loom serve` with real clients: curl (raw SSE framing, /health,
# /metrics) and the official `openai` npm package (completion, chat, streaming, an error).
# The gtest binary test_server also runs `loom generate`, so it needs the loom executable.
if(TARGET test_server)
  add_dependencies(test_server loom)
  # The gzip bomb of test_hostile_framing.cpp is made with zlib (present wherever cpp-httplib
  # was built with CPPHTTPLIB_ZLIB_SUPPORT; the test skips that part without it).
  find_package(ZLIB)
  if(ZLIB_FOUND)
    target_link_libraries(test_server PRIVATE ZLIB::ZLIB)
  endif()
endif()

find_program(LOOM_CURL curl)
if(LOOM_CURL)
  add_test(NAME server_curl
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/curl_test.sh $<TARGET_FILE:loom> ${CMAKE_CURRENT_BINARY_DIR}/server-curl)
  set_tests_properties(server_curl PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()

find_program(LOOM_NODE node)
find_program(LOOM_NPM npm)
if(LOOM_NODE AND LOOM_NPM)
  # The openai package goes into the build directory (never the source tree); the setup is a
  # no-op when it is already there, and skips (77) when npm cannot reach the registry.
  set(loom_node_dir ${CMAKE_BINARY_DIR}/server-node)
  add_test(NAME server_node_setup
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/node/setup.sh ${CMAKE_CURRENT_LIST_DIR}/node ${loom_node_dir})
  set_tests_properties(server_node_setup PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                       FIXTURES_SETUP server_node)
  add_test(NAME server_node_openai
           COMMAND ${LOOM_NODE} ${CMAKE_CURRENT_LIST_DIR}/node/openai_client.test.mjs)
  set_tests_properties(server_node_openai PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77
                       FIXTURES_REQUIRED server_node
                       ENVIRONMENT "LOOM_BIN=$<TARGET_FILE:loom>;LOOM_NODE_DIR=${loom_node_dir};LOOM_WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/server-node-work")
endif()

# Issue 19, defect 4 under mpirun: a frozen follower rank makes the engine dead and the server
# shut down (curl as the client).
if(LOOM_MPI AND LOOM_CURL)
  add_test(NAME server_mpi_dead_follower
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_dead_follower_mpi.sh $<TARGET_FILE:loom>
                   ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin ${loom_mpirun})
  set_tests_properties(server_mpi_dead_follower PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${loom_mpi_env}")
endif()

# Issue 36 under mpirun: an idle server whose follower is stopped (SIGSTOP) answers /health 503
# (heartbeat) within seconds, and 200 again once it continues (curl as the client).
if(LOOM_MPI AND LOOM_CURL)
  add_test(NAME server_mpi_stopped_follower
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_stopped_follower_mpi.sh $<TARGET_FILE:loom>
                   ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin ${loom_mpirun})
  set_tests_properties(server_mpi_stopped_follower PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${loom_mpi_env}")
endif()

# Nitsum's pool (--policy nitsum) under mpirun: 3 processes (control plane + 2 workers), forced
# layouts cycling P/D and TP(2) (K/V moved over MPI), greedy text equal to one rank (curl).
if(LOOM_MPI AND LOOM_CURL)
  add_test(NAME server_mpi_nitsum_pool
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/serve_nitsum_mpi.sh $<TARGET_FILE:loom>
                   ${CMAKE_SOURCE_DIR}/../shared/models/stories260K/stories260K.bin ${loom_mpirun})
  set_tests_properties(server_mpi_nitsum_pool PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${loom_mpi_env}")
endif()
