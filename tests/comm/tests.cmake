# MPI tests of src/comm: the test_comm_mpi program under mpirun with 1, 2, 3, 4 and 8 ranks, and
# fault runs that must end the job with a clear error instead of hanging (mpirun flags:
# tests/CMakeLists.txt).
if(LOOM_MPI AND TARGET loom_comm)
  add_executable(test_comm_mpi ${CMAKE_CURRENT_LIST_DIR}/mpi/main.cpp
                               ${CMAKE_CURRENT_LIST_DIR}/checks.cpp)
  target_include_directories(test_comm_mpi PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(test_comm_mpi PRIVATE loom_comm GTest::gtest)
  foreach(n 1 2 3 4 8)
    add_test(NAME comm_mpi_${n}ranks
             COMMAND ${loom_mpirun} -np ${n} $<TARGET_FILE:test_comm_mpi>)
    set_tests_properties(comm_mpi_${n}ranks PROPERTIES TIMEOUT 120
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
  # Messages split into 64 KiB pieces: the path that keeps counts below INT_MAX, exercised
  # without allocating gigabytes.
  add_test(NAME comm_mpi_3ranks_small_pieces
           COMMAND ${loom_mpirun} -x LOOM_MPI_PIECE_BYTES=65536 -np 3
                   $<TARGET_FILE:test_comm_mpi>)
  set_tests_properties(comm_mpi_3ranks_small_pieces PROPERTIES TIMEOUT 120
                       ENVIRONMENT "${loom_mpi_env}")
  set(loom_fault_die "exited|abort|signal")
  set(loom_fault_stuck "barrier did not complete within 2 s")
  set(loom_fault_disagree "ranks disagree on plan .*ranks 0,2 have 0x600d; rank 1 has 0xbad")
  set(loom_fault_size "disagree on the size|did not complete within")
  foreach(fault die stuck disagree size)
    add_test(NAME comm_mpi_fault_${fault}
             COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/mpi/expect_failure.sh 30 "${loom_fault_${fault}}"
                     ${loom_mpirun} -np 3 $<TARGET_FILE:test_comm_mpi> --fault=${fault})
    set_tests_properties(comm_mpi_fault_${fault} PROPERTIES TIMEOUT 60
                         ENVIRONMENT "${loom_mpi_env}")
  endforeach()
endif()
