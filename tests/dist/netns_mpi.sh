#!/bin/sh
# Two "hosts" on this machine: two network namespaces joined by a veth pair, each with its own
# address (10.211.X.1 and 10.211.X.2). mpirun runs in the first; OpenMPI starts the second
# host's daemon through a launch agent that enters the other namespace (`ip netns exec`) where
# a cluster would use ssh. MPI traffic is forced onto TCP (--mca btl tcp,self) over the veth,
# so the byte path between ranks is MPI's TCP transport between two network stacks, not shared
# memory.
#   1. a TP plan (tp=2) and a Shift plan (sp=2 --policy shift) across the two hosts give the
#      single-rank greedy ids (mpi_generate.sh);
#   2. a rank killed (SIGKILL) on the second host mid-run: the survivor's job ends non-zero with
#      a message naming the dead rank, within the communicator timeout (LOOM_COMM_TIMEOUT_S).
# Skips (77) when not root or when namespaces cannot be created (containers without
# CAP_SYS_ADMIN/CAP_NET_ADMIN), or without ../shared.
# Usage: netns_mpi.sh LOOM MODEL MPIRUN [MPIRUN ARGS...]
set -u
loom=$1 model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -e "$model" ]; then echo "skip: $model is missing (../shared not beside the checkout)"; exit 77; fi
if [ "$(id -u)" != 0 ]; then echo "skip: network namespaces need root (ip netns add)"; exit 77; fi
command -v ip >/dev/null 2>&1 || { echo "skip: no ip(8) (iproute2)"; exit 77; }
tag=$$
nsa=loom19a$tag nsb=loom19b$tag
# A /24 of its own per run (parallel ctest runs must not share addresses).
net=10.211.$((tag % 250))
tmp=$(mktemp -d)
cleanup() {
  ip netns pids "$nsb" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns pids "$nsa" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$nsa" 2>/dev/null
  ip netns del "$nsb" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! ip netns add "$nsa" 2>"$tmp/err"; then
  echo "skip: cannot create a network namespace: $(cat "$tmp/err")"; exit 77
fi
ip netns add "$nsb" || exit 1
ip link add va$tag type veth peer name vb$tag || { echo "skip: cannot create a veth pair"; exit 77; }
ip link set va$tag netns "$nsa" && ip link set vb$tag netns "$nsb" || exit 1
ip -n "$nsa" addr add $net.1/24 dev va$tag && ip -n "$nsa" link set va$tag up && ip -n "$nsa" link set lo up || exit 1
ip -n "$nsb" addr add $net.2/24 dev vb$tag && ip -n "$nsb" link set vb$tag up && ip -n "$nsb" link set lo up || exit 1
# The hosts see each other over the veth only.
ip -n "$nsa" route get $net.2 | grep -q "dev va$tag" || { echo "FAIL: $net.1 has no route to $net.2 over the veth"; exit 1; }

# The launch agent: OpenMPI calls it as `agent [ssh options] HOST COMMAND...` (as it would call
# ssh); it runs COMMAND (a shell command line, as for a remote shell) inside HOST's namespace.
cat > "$tmp/agent.sh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case "\$host" in
  $net.1) ns=$nsa ;;
  $net.2) ns=$nsb ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"

mpirun_cmd="ip netns exec $nsa $* --host $net.1:1,$net.2:1 --mca plm_rsh_agent $tmp/agent.sh \
  --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24"

# 1. TP and Shift plans across the hosts: same greedy ids as one rank.
# shellcheck disable=SC2086
sh "$here/mpi_generate.sh" "$loom" "$model" 2 tp=2 24 fixed $mpirun_cmd || exit 1
# shellcheck disable=SC2086
sh "$here/mpi_generate.sh" "$loom" "$model" 2 sp=2 24 shift $mpirun_cmd || exit 1
# Both ranks really ran in different namespaces: rank 1's daemon was started by the agent.
# (mpi_generate.sh compared the ids; the agent refuses unknown hosts, and mpirun in $nsa can
# only reach $net.2 over the veth.)

# 2. A rank killed on the second host mid-run.
timeout_s=${LOOM_COMM_TIMEOUT_S:-20}
export LOOM_COMM_TIMEOUT_S=$timeout_s
start=$(date +%s)
# shellcheck disable=SC2086
$mpirun_cmd -x LOOM_COMM_TIMEOUT_S -np 2 "$loom" generate -m "$model" -n 480 --comm mpi --plan tp=2 \
  -p "Once upon a time" -p "Tom" -p "The sun was hot" -p "Lily and Ben" >"$tmp/out" 2>"$tmp/err" &
job=$!
# Wait for generated text on stdout (generation streams), then kill the rank in the other host.
victim=""
for _ in $(seq 1 600); do
  if [ -s "$tmp/out" ]; then
    for pid in $(ip netns pids "$nsb" 2>/dev/null); do
      if tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q "generate -m"; then victim=$pid; fi
    done
    [ -n "$victim" ] && break
  fi
  kill -0 $job 2>/dev/null || break
  sleep 0.1
done
if [ -z "$victim" ]; then
  echo "FAIL: no rank found in $nsb while the job ran"; cat "$tmp/err"; exit 1
fi
kill -9 "$victim"
killed=$(date +%s)
# The survivors must end on their own within the communicator timeout (+ start-up slack).
limit=$((timeout_s + 30))
waited=0
while kill -0 $job 2>/dev/null && [ $waited -lt $limit ]; do sleep 1; waited=$((waited + 1)); done
if kill -0 $job 2>/dev/null; then
  echo "FAIL: the job still runs $limit s after rank 1 was killed (hang)"; kill -9 $job; cat "$tmp/err"; exit 1
fi
wait $job
rc=$?
end=$(date +%s)
tail -n 20 "$tmp/err"
if [ $rc -eq 0 ]; then echo "FAIL: the job exited 0 although rank 1 was killed"; exit 1; fi
if ! grep -Eqi "rank 1|process rank 1|exited on signal 9" "$tmp/err"; then
  echo "FAIL: the error does not name the dead rank"; exit 1
fi
echo "OK: TP and Shift plans across two network namespaces match one rank; after rank 1 was killed on $net.2 the job ended with status $rc in $((end - killed)) s (communicator timeout $timeout_s s; $((end - start)) s in all)"
