/* transport_comm.h — the communicator-backed schedule transport: pipeline stages in different processes exchange activations and gradients point to point. */
#ifndef TG_SCHED_TRANSPORT_COMM_H
#define TG_SCHED_TRANSPORT_COMM_H

#include "dist/comm.h"
#include "sched/executor.h"

/* A transport for the process that runs stage rank+1 of plan: stage s runs
 * on rank s-1 of comm (a pipeline communicator, comm.split{pp=}.pp, or the
 * world when every rank is one stage), so comm's size must be plan->stages.
 * Collective over comm: the ranks first compare their plans (shape and a
 * hash of every stage's actions) and all fail with TG_EINVAL "the pipeline
 * ranks run different plans: ..." when they differ.
 * Each transfer is a small i32 header (direction, chunk, mb, dtype, device
 * type, shape) followed by the tensor, so the receiver allocates what it
 * needs (on the CPU, or on comm's CUDA device) without being told shapes,
 * and a header naming another transfer than the one expected fails clearly.
 * Sends and receives block the executor (recv never answers NULL) within
 * the comm timeout: a dead or stuck peer becomes an error naming the
 * transfer, not a hang. On CUDA tensors they are stream-ordered, as
 * tg_comm_send/recv are. Headers travel over MPI when comm has it (no device
 * sync), else over NCCL (the receiver waits for each header on the host).
 * comm must outlive the transport; free it with out->free(out->ud). */
tg_status tg_sched_transport_comm(tg_comm *comm, const tg_sched_plan *plan, struct tg_sched_transport *out);

#endif
