# Sourced by the tests' mpirun scripts: find one world rank's process of THIS script's job.
# ctest -j runs several mpirun scripts at once, and two of them may start the same loom command
# line (server_mpi_dead_follower and server_mpi_stopped_follower both run `loom serve -m MODEL
# --comm mpi --plan tp=2`): a pgrep on the command line alone can find the other job's rank and
# freeze or kill it. The job is tagged instead: export LOOM_TEST_TAG (set here, unique per script
# run) and pass `-x LOOM_TEST_TAG` to mpirun; rank_pid matches the rank and the tag.
LOOM_TEST_TAG="$$-$(date +%s%N)"
export LOOM_TEST_TAG

# rank_pid PATTERN RANK: the pid of the process matching PATTERN (pgrep -f) whose environment
# has OMPI_COMM_WORLD_RANK=RANK and this script's LOOM_TEST_TAG; empty when none.
rank_pid() {
  for pid in $(pgrep -f "$1" 2>/dev/null); do
    env=$(tr '\0' '\n' < /proc/"$pid"/environ 2>/dev/null) || continue
    printf '%s\n' "$env" | grep -qx "LOOM_TEST_TAG=$LOOM_TEST_TAG" || continue
    printf '%s\n' "$env" | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$pid"; return 0; }
  done
  return 0
}
