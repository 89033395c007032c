# dist.sh — sourced by the t/dist-*.sh tests: TAP helpers, skip without MPI, run a script on N ranks under mpirun.
. "${TG_TOP_SRCDIR:-.}/t/lib/tap.sh"
# The multi-rank tests run CPU ranks over MPI whatever the machine has: a host with fewer GPUs than ranks
# cannot give each rank a GPU of its own (NCCL setup refuses it), and the tests compare with CPU references.
TG_DEVICE=cpu
export TG_DEVICE
SRCDIR="${TG_TOP_SRCDIR:-.}"
# Two ranks share the CPUs: one OpenMP thread each keeps them from spinning against each other.
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
# Containers often forbid the cross-process reads (CMA) Open MPI's shared-memory transport uses
# for larger messages ("Read -1, expected ..., errno = 1"): copy through shared memory instead.
OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
export OMPI_MCA_btl_vader_single_copy_mechanism

# Under --enable-sanitizers: Open MPI leaves its own allocations at exit, which LeakSanitizer
# would report for every rank; leaks of tegraph's own code are checked by the other tests.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS

finish() {
    [ "$fails" -eq 0 ]
    exit $?
}

skip_unless_mpi() {
    if [ -z "${TG_MPIRUN:-}" ]; then echo "1..0 # SKIP no mpirun found by configure (TG_MPIRUN is empty)"; exit 0; fi
    case "$("$TEGRAPH" info 2>/dev/null)" in
    *mpi=yes*) ;;
    *) echo "1..0 # SKIP this tegraph was built without MPI"; exit 0 ;;
    esac
    # Open MPI refuses to start as root unless told; CI (.ci/run) tells it, a root shell must too.
    if [ "$(id -u)" = 0 ] && [ -z "${OMPI_ALLOW_RUN_AS_ROOT:-}" ]; then
        echo "1..0 # SKIP running as root: Open MPI needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
        exit 0
    fi
}

# A command bounded in time when timeout(1) exists (a hang fails instead of blocking make check).
bounded() {
    if command -v timeout >/dev/null 2>&1; then timeout "$@"; else shift; "$@"; fi
}

# both FILE TEXT: both ranks (0 and 1) printed a line holding TEXT
both() {
    grep -F -- "$2" "$1" | grep -q "^rank 0: " && grep -F -- "$2" "$1" | grep -q "^rank 1: "
}

# mpirun_tap NP SCRIPT [ARGS...]: rank 0's TAP on stdout, the job's exit status.
mpirun_tap() {
    np=$1
    shift
    bounded 120 "$TG_MPIRUN" -np "$np" --oversubscribe "$TEGRAPH" run "$@"
}
