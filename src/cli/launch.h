/* launch.h — `tegraph run -n N` (local ranks) and the per-rank setup of `tegraph run` (launch.c). */
#ifndef TG_CLI_LAUNCH_H
#define TG_CLI_LAUNCH_H

/* `tegraph run -n N FILE.lua [ARGS...]` or `tegraph run -n N -e CODE`,
 * argv[0] = "-n": starts N ranks of `tegraph run FILE.lua ARGS...` (`tegraph
 * run -e CODE`) and returns the exit status (2: usage error). The ranks get
 * TG_STDOUT_TTY=1 when the launcher's stdout is a terminal, else 0. On GPUs (NCCL built, a CUDA device visible, TG_DEVICE not "cpu")
 * the ranks are forked here, one GPU each, with TG_RANK, TG_WORLD_SIZE,
 * TG_LOCAL_RANK, TG_LOCAL_WORLD_SIZE and an NCCL unique id (TG_NCCL_ID); when
 * one fails the others are stopped (SIGTERM, then SIGKILL after 5 s) and the
 * failing rank is named. On CPUs (MPI built) it execs `mpirun -np N` (TG_MPIRUN
 * picks the program), and mpirun does the same. TG_LAUNCHER=fork|mpirun
 * forces a way. */
int tg_cli_launch(int argc, char **argv);

/* At the start of `tegraph run` in a rank of a multi-rank job (from the
 * launcher's or mpirun's environment): stderr goes through a child that
 * prefixes every line with "[rank R] " (TG_RANK_PREFIX=0 turns it off), and
 * on GPUs the rank's default device is cuda:(local rank). No-op otherwise. */
void tg_cli_rank_begin(void);
/* After the script: flushes the prefixed stderr; when the script failed,
 * stops the whole job (MPI_Abort under MPI, NCCL comms aborted). */
void tg_cli_rank_end(int failed);

#endif
