// Collective checks shared by the local/single tests (test_comm) and the MPI test program
// (test_comm_mpi, run under mpirun). Each is called on every rank of a group and returns ""
// when this rank's result matches the naive expectation, else a description of the first
// mismatch. Rank r's inputs are a known function of (r, index), so each rank computes the
// expected result independently of the code under test.
//
// Metric: bitwise equality. Sums are compared with the rank-order f32 sum
// ((x_0 + x_1) + ...) + x_{P-1}, the contract in comm/communicator.h; the inputs are chosen so
// that other orders round differently.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace loom::test {

// Awkward sizes every collective is tried with (elements, or bytes for byte collectives).
const std::vector<std::size_t>& comm_sizes();
// Per-rank chunk for collectives whose buffers are size() chunks: n, but about n / size() (odd)
// for the largest size so buffers stay near 4 MB.
std::size_t per_rank_count(std::size_t n, int n_ranks);

// Rank r's input element i (also used as "rank r's value" by gathers).
float comm_value(int r, std::size_t i);

std::string check_all_reduce(Communicator& c, std::size_t n);
std::string check_reduce_scatter(Communicator& c, std::size_t n_per_rank);
std::string check_reduce_scatter_v(Communicator& c, std::size_t base);
std::string check_all_gather(Communicator& c, std::size_t n_per_rank);
std::string check_all_gather_in_place(Communicator& c, std::size_t bytes_per_rank);
std::string check_all_gather_v(Communicator& c, std::size_t base);
std::string check_all_to_all(Communicator& c, std::size_t n_per_rank);
std::string check_all_to_all_v(Communicator& c, std::size_t base);
std::string check_broadcast(Communicator& c, std::size_t bytes, int root);
std::string check_send_recv(Communicator& c, std::size_t bytes);
std::string check_get(Communicator& c, std::size_t bytes);
std::string check_split(Communicator& c, std::size_t n);
// Equal hashes pass; then rank 1 (when size() > 1) passes a different hash and every rank must
// throw loom::Error naming "plan", rank 1 and both values.
std::string check_agreement_detects(Communicator& c);

// Runs every check above for every size in comm_sizes() (and every root), in the same order
// on all ranks; returns all mismatches joined by newlines.
std::string check_everything(Communicator& c);

}  // namespace loom::test
