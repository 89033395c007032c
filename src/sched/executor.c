/* executor.c — runs every local stage's action list, interleaving stages until each blocks on a recv; F/B/W on modules or graphed callables. */
#include "sched/executor.h"
#include "trace/trace.h"

#include <string.h>

static const char *const OP_NAMES[] = {"F", "B", "W", "send_fwd", "recv_fwd", "send_bwd", "recv_bwd"};

const char *tg_sched_op_name(enum tg_sched_op op)
{
    return (unsigned)op < sizeof OP_NAMES / sizeof *OP_NAMES ? OP_NAMES[op] : "?";
}

int tg_sched_op_parse(const char *s, enum tg_sched_op *out)
{
    for (unsigned i = 0; s && i < sizeof OP_NAMES / sizeof *OP_NAMES; i++)
        if (strcmp(s, OP_NAMES[i]) == 0) {
            *out = (enum tg_sched_op)i;
            return 0;
        }
    return -1;
}

static int is_comm(enum tg_sched_op op) { return op >= TG_SCHED_SEND_FWD; }
static int is_send(enum tg_sched_op op) { return op == TG_SCHED_SEND_FWD || op == TG_SCHED_SEND_BWD; }
static int is_bwd(enum tg_sched_op op) { return op == TG_SCHED_SEND_BWD || op == TG_SCHED_RECV_BWD; }

const char *tg_sched_action_str(const struct tg_sched_action *a, char *buf, size_t n)
{
    if (is_comm(a->op))
        snprintf(buf, n, "%s chunk %d mb %d %s stage %d", tg_sched_op_name(a->op), a->chunk, a->mb,
                 is_send(a->op) ? "to" : "from", a->peer);
    else
        snprintf(buf, n, "%s chunk %d mb %d", a->op == TG_SCHED_B && a->w ? "B+W" : tg_sched_op_name(a->op), a->chunk,
                 a->mb);
    return buf;
}

/* ------------------------------------------------------------------ the in-process mailbox */
struct mailbox {
    int nchunks, mbs;
    tg_tensor **slot; /* (2, nchunks, mbs): [bwd][chunk-1][mb-1] */
};

static tg_tensor **mail_slot(struct mailbox *mb, const struct tg_sched_xfer *x)
{
    return &mb->slot[((size_t)x->bwd * mb->nchunks + (size_t)(x->chunk - 1)) * mb->mbs + (size_t)(x->mb - 1)];
}

static tg_status mail_send(void *ud, const struct tg_sched_xfer *x, const tg_tensor *t)
{
    tg_tensor **s = mail_slot(ud, x);
    if (*s)
        return tg_error(TG_ESTATE, "%s of chunk %d mb %d sent twice (the first was not received yet)",
                        x->bwd ? "input gradient" : "output", x->chunk, x->mb);
    return tg_tensor_ref(t, s);
}

static tg_status mail_recv(void *ud, const struct tg_sched_xfer *x, tg_tensor **out)
{
    tg_tensor **s = mail_slot(ud, x);
    *out = *s; /* ownership moves to the receiver */
    *s = NULL;
    return TG_OK;
}

static tg_status mail_finish(void *ud)
{
    struct mailbox *mb = ud;
    for (int b = 0; b < 2; b++)
        for (int c = 1; c <= mb->nchunks; c++)
            for (int m = 1; m <= mb->mbs; m++) {
                struct tg_sched_xfer x = {.bwd = b, .chunk = c, .mb = m};
                if (*mail_slot(mb, &x))
                    return tg_error(TG_ESTATE, "send_%s chunk %d mb %d was never received", b ? "bwd" : "fwd", c, m);
            }
    return TG_OK;
}

static void mail_free(void *ud)
{
    struct mailbox *mb = ud;
    if (!mb) return;
    for (size_t i = 0; i < 2 * (size_t)mb->nchunks * mb->mbs; i++) tg_tensor_free(mb->slot[i]);
    free(mb->slot);
    free(mb);
}

tg_status tg_sched_transport_local(int nchunks, int microbatches, struct tg_sched_transport *out)
{
    memset(out, 0, sizeof *out);
    if (nchunks < 1 || microbatches < 1)
        return tg_error(TG_EINVAL, "transport: %d chunks, %d microbatches", nchunks, microbatches);
    struct mailbox *mb = calloc(1, sizeof *mb);
    if (mb) mb->slot = calloc(2 * (size_t)nchunks * microbatches, sizeof *mb->slot);
    if (!mb || !mb->slot) {
        free(mb);
        return tg_error(TG_ENOMEM, "out of host memory");
    }
    mb->nchunks = nchunks;
    mb->mbs = microbatches;
    *out = (struct tg_sched_transport){mail_send, mail_recv, mail_finish, mail_free, mb};
    return TG_OK;
}

/* ------------------------------------------------------------------ one run */
enum { ST_NONE, ST_F, ST_B, ST_W }; /* how far each (chunk, mb) got */

struct run {
    const tg_sched_plan *p;
    const tg_sched_opts *o;
    struct tg_sched_transport *tr;
    int C, M;
    /* Tensors between actions, each (C, M) by the chunk named and mb. */
    tg_tensor **x_in;   /* input of chunk c: from F of c-1 on this stage or recv_fwd chunk c-1 */
    tg_tensor **dy_in;  /* gradient of chunk c's output: from B of c+1 or recv_bwd chunk c+1 */
    tg_tensor **y_out;  /* output of chunk c waiting for send_fwd (or, for the last chunk, the loss) */
    tg_tensor **dx_out; /* input gradient of chunk c waiting for send_bwd */
    char *state;        /* (C, M) ST_* */
    int *xfer_span;     /* (2, C, M) trace span of each transfer, open from its send to its recv (-1: none) */
    /* dry run (tg_sched_order): no work, only the interleaving */
    int dry;
    char *posted;       /* (2, C, M) */
    struct tg_graph_action *order;
    int norder;
};

static size_t ix(const struct run *r, int c, int mb) { return (size_t)(c - 1) * r->M + (size_t)(mb - 1); }

static void take(tg_tensor **slot, tg_tensor **out)
{
    *out = *slot;
    *slot = NULL;
}

/* Structure checks, before anything runs. */
static tg_status check_action(const tg_sched_plan *p, int s, const struct tg_sched_action *a)
{
    int C = p->nchunks;
    if ((unsigned)a->op > TG_SCHED_RECV_BWD) return tg_error(TG_EINVAL, "unknown op %d", (int)a->op);
    if (a->chunk < 1 || a->chunk > C) return tg_error(TG_EINVAL, "chunk must be in 1..%d", C);
    if (a->mb < 1 || a->mb > p->microbatches) return tg_error(TG_EINVAL, "mb must be in 1..%d", p->microbatches);
    if (!is_comm(a->op)) {
        if (p->owner[a->chunk - 1] != s)
            return tg_error(TG_EINVAL, "chunk %d belongs to stage %d", a->chunk, p->owner[a->chunk - 1]);
        if (a->w && a->op != TG_SCHED_B) return tg_error(TG_EINVAL, "w = true is only for B");
        return TG_OK;
    }
    int fwd = !is_bwd(a->op);
    if (fwd && a->chunk == C) return tg_error(TG_EINVAL, "the last chunk has no forward output to transfer");
    if (!fwd && a->chunk == 1) return tg_error(TG_EINVAL, "chunk 1 has no input gradient to transfer");
    int producer = p->owner[a->chunk - 1], consumer = p->owner[(fwd ? a->chunk + 1 : a->chunk - 1) - 1];
    int here = is_send(a->op) ? producer : consumer, there = is_send(a->op) ? consumer : producer;
    if (here != s)
        return tg_error(TG_EINVAL, "chunk %d, which %s it, is on stage %d", is_send(a->op) ? a->chunk : fwd ? a->chunk + 1 : a->chunk - 1,
                        is_send(a->op) ? "produces" : "consumes", here);
    if (a->peer != there) return tg_error(TG_EINVAL, "wrong peer: the other end is stage %d", there);
    return TG_OK;
}

/* A chunk's wgrad store is a FIFO in B order: each W (and the W of a fused
 * B+W) must take its head. Replays the plan's B and W per chunk (each chunk's
 * actions are on its owner's list, in order); a W whose B has not run is left
 * to the run's own "W before B". Structure is checked first. */
static tg_status check_w_order(const tg_sched_plan *p)
{
    size_t C = (size_t)p->nchunks, M = (size_t)p->microbatches;
    int *q = malloc(C * M * sizeof *q), *head = calloc(C, sizeof *head), *tail = calloc(C, sizeof *tail);
    tg_status st = q && head && tail ? TG_OK : tg_error(TG_ENOMEM, "out of host memory");
    char d[96];
    for (int s = 1; s <= p->stages && st == TG_OK; s++)
        for (int i = 0; i < p->nactions[s - 1] && st == TG_OK; i++) {
            const struct tg_sched_action *a = &p->actions[s - 1][i];
            if (a->op != TG_SCHED_B && a->op != TG_SCHED_W) continue;
            size_t c = (size_t)a->chunk - 1;
            int *cq = q + c * M;
            if (a->op == TG_SCHED_B && tail[c] < (int)M) cq[tail[c]++] = a->mb;
            if (a->op == TG_SCHED_B && !a->w) continue;
            int queued = 0;
            for (int k = head[c]; k < tail[c]; k++) queued |= cq[k] == a->mb;
            if (!queued) continue;
            if (cq[head[c]] == a->mb) {
                head[c]++;
                continue;
            }
            st = tg_error(TG_ESTATE, "stage %d action %d (%s): %sW of chunk %d must follow its B order; the wgrad store's head is mb %d",
                          s, i + 1, tg_sched_action_str(a, d, sizeof d), a->op == TG_SCHED_B ? "the fused " : "", a->chunk,
                          cq[head[c]]);
        }
    free(q);
    free(head);
    free(tail);
    return st;
}

static tg_status check_plan(const tg_sched_plan *p, const tg_sched_opts *o)
{
    if (p->stages < 1 || p->nchunks < 1 || p->microbatches < 1)
        return tg_error(TG_EINVAL, "schedule: %d stages, %d chunks, %d microbatches (each must be >= 1)", p->stages, p->nchunks,
                        p->microbatches);
    for (int c = 1; c <= p->nchunks; c++) {
        int s = p->owner[c - 1];
        if (s < 1 || s > p->stages) return tg_error(TG_EINVAL, "schedule: chunk %d is owned by stage %d of %d", c, s, p->stages);
        if (!o || (o->local && !o->local[s - 1])) continue;
        int graphed = o->graphed && o->graphed[c - 1];
        if (!graphed && !(o->chunks && o->chunks[c - 1]))
            return tg_error(TG_EINVAL, "schedule: no module (nor graphed callable) for chunk %d", c);
        if (graphed && (!o->graphed_chunk || o->graphed_chunk[c - 1] < 1 ||
                        o->graphed_chunk[c - 1] > tg_graphed_nchunks(o->graphed[c - 1])))
            return tg_error(TG_EINVAL, "schedule: chunk %d's index in its graphed set is out of range", c);
    }
    char d[96];
    for (int s = 1; s <= p->stages; s++)
        for (int i = 0; i < p->nactions[s - 1]; i++) {
            const struct tg_sched_action *a = &p->actions[s - 1][i];
            tg_status st = check_action(p, s, a);
            if (st != TG_OK)
                return tg_error_prefix(st, "stage %d action %d (%s)", s, i + 1,
                                       (unsigned)a->op <= TG_SCHED_RECV_BWD ? tg_sched_action_str(a, d, sizeof d) : "?");
        }
    return check_w_order(p);
}

/* ------------------------------------------------------------------ tracing
 * While a trace runs, each action is a host span on its stage's track
 * (dur: host time, device time too with opts.sync), hook dispatches inside it
 * land on the same track, and each in-process transfer is an async span from
 * its send to its recv. */
static int trace_action(const struct tg_sched_action *a, int s, int idx, const char *args)
{
    char name[96];
    struct tg_trace_about about = {.cat = "action", .op = a->op == TG_SCHED_B && a->w ? "B+W" : tg_sched_op_name(a->op),
                                   .stage = s, .chunk = a->chunk, .mb = a->mb, .index = idx, .step = tg_step_index(),
                                   .args = args};
    return tg_trace_open(NULL, TG_TRACK_STAGE(s), tg_sched_action_str(a, name, sizeof name), &about);
}

static int trace_transfer(const struct tg_sched_xfer *x)
{
    char name[64], args[48];
    snprintf(name, sizeof name, "%s chunk %d mb %d", x->bwd ? "grad" : "act", x->chunk, x->mb);
    snprintf(args, sizeof args, "\"from\":%d,\"to\":%d", x->from, x->to);
    struct tg_trace_about about = {.cat = "transfer", .stage = x->from, .chunk = x->chunk, .mb = x->mb,
                                   .step = tg_step_index(), .args = args, .async = 1};
    return tg_trace_open(NULL, TG_TRACK_STAGE(x->from), name, &about);
}

/* ------------------------------------------------------------------ actions */
static tg_status sync_chunk(struct run *r, int c)
{
    if (!r->o->sync) return TG_OK;
    tg_module *m = r->o->graphed && r->o->graphed[c - 1] ? tg_graphed_chunk(r->o->graphed[c - 1], r->o->graphed_chunk[c - 1])
                                                         : r->o->chunks[c - 1];
    tg_stream *st = tg_stream_current(m->opts.device);
    return st ? tg_stream_sync(st) : TG_OK;
}

static tg_status do_forward(struct run *r, int s, const struct tg_sched_action *a)
{
    int c = a->chunk, mb = a->mb;
    tg_graphed *g = r->o->graphed ? r->o->graphed[c - 1] : NULL;
    tg_tensor *x = NULL, *y = NULL;
    if (c == 1) {
        if (!r->o->input) return tg_error(TG_EINVAL, "no input function for chunk 1");
        TG_TRY(r->o->input(r->o->ud, mb, &x));
        if (!x) return tg_error(TG_EINVAL, "the input function gave no tensor for microbatch %d", mb);
    } else {
        take(&r->x_in[ix(r, c, mb)], &x);
        if (!x)
            return tg_error(TG_ESTATE, "its input has not arrived (no %s chunk %d mb %d before it on this stage)",
                            r->p->owner[c - 2] == s ? "F" : "recv_fwd", c - 1, mb);
    }
    tg_status st = g ? tg_graphed_forward(g, r->o->graphed_chunk[c - 1], mb, x, &y) : tg_module_forward(r->o->chunks[c - 1], mb, x, &y);
    tg_tensor_free(x);
    if (st != TG_OK) {
        tg_tensor_free(y); /* a module failing late (a hook) may have handed it out */
        return st;
    }
    if (c < r->C && r->p->owner[c] == s) {
        tg_tensor_free(r->x_in[ix(r, c + 1, mb)]);
        r->x_in[ix(r, c + 1, mb)] = y;
    } else {
        tg_tensor_free(r->y_out[ix(r, c, mb)]);
        r->y_out[ix(r, c, mb)] = y;
    }
    return TG_OK;
}

/* Whether the W of a's chunk has work: a W graph, or wgrad queued on the module. */
static int w_pending(const struct run *r, const struct tg_sched_action *a)
{
    int c = a->chunk;
    tg_graphed *g = r->o->graphed ? r->o->graphed[c - 1] : NULL;
    return g ? tg_graphed_has_w(g, r->o->graphed_chunk[c - 1]) : tg_module_need_backward_dw(r->o->chunks[c - 1]);
}

/* W of chunk c for mb, when it has work (else nothing). */
static tg_status do_wgrad(struct run *r, const struct tg_sched_action *a)
{
    int c = a->chunk;
    tg_graphed *g = r->o->graphed ? r->o->graphed[c - 1] : NULL;
    if (!w_pending(r, a)) return TG_OK;
    if (g) return tg_graphed_backward_dw(g, r->o->graphed_chunk[c - 1], a->mb);
    return tg_module_backward_dw(r->o->chunks[c - 1], a->mb);
}

static tg_status do_backward(struct run *r, int s, const struct tg_sched_action *a)
{
    int c = a->chunk, mb = a->mb;
    tg_graphed *g = r->o->graphed ? r->o->graphed[c - 1] : NULL;
    tg_tensor *dy = NULL, *dx = NULL;
    if (c == r->C) {
        tg_tensor *y = NULL;
        take(&r->y_out[ix(r, c, mb)], &y);
        TG_ASSERT(y); /* the state check saw its F */
        tg_status st = r->o->loss_grad ? r->o->loss_grad(r->o->ud, mb, y, &dy)
                                       : tg_error(TG_EINVAL, "no loss gradient function for the last chunk");
        tg_tensor_free(y);
        TG_TRY(st);
    } else {
        take(&r->dy_in[ix(r, c, mb)], &dy);
        if (!dy)
            return tg_error(TG_ESTATE, "its output gradient has not arrived (no %s chunk %d mb %d before it on this stage)",
                            r->p->owner[c] == s ? "B" : "recv_bwd", c + 1, mb);
    }
    tg_status st = g ? tg_graphed_backward(g, r->o->graphed_chunk[c - 1], mb, dy, &dx)
                     : tg_module_backward(r->o->chunks[c - 1], mb, dy, &dx);
    tg_tensor_free(dy);
    if (st != TG_OK) {
        tg_tensor_free(dx); /* a hook failing after the dgrad leaves dx behind */
        return st;
    }
    if (c == 1 || !dx) {
        tg_tensor_free(dx);
    } else if (r->p->owner[c - 2] == s) {
        tg_tensor_free(r->dy_in[ix(r, c - 1, mb)]);
        r->dy_in[ix(r, c - 1, mb)] = dx;
    } else {
        tg_tensor_free(r->dx_out[ix(r, c, mb)]);
        r->dx_out[ix(r, c, mb)] = dx;
    }
    return a->w ? do_wgrad(r, a) : TG_OK;
}

/* Order of F before B before W per (chunk, mb), and no repeats. */
static tg_status check_state(struct run *r, const struct tg_sched_action *a)
{
    char *st = &r->state[ix(r, a->chunk, a->mb)];
    int want = a->op == TG_SCHED_F ? ST_NONE : a->op == TG_SCHED_B ? ST_F : ST_B;
    if (*st == want) return TG_OK;
    if (*st > want) return tg_error(TG_ESTATE, "duplicate %s (or after a fused B+W)", tg_sched_op_name(a->op));
    return tg_error(TG_ESTATE, "%s before %s", tg_sched_op_name(a->op), a->op == TG_SCHED_B ? "F" : *st == ST_NONE ? "F" : "B");
}

static void set_state(struct run *r, const struct tg_sched_action *a)
{
    r->state[ix(r, a->chunk, a->mb)] = a->op == TG_SCHED_F ? ST_F : a->op == TG_SCHED_B ? (a->w ? ST_W : ST_B) : ST_W;
}

static void xfer_of(const struct tg_sched_action *a, int s, struct tg_sched_xfer *x)
{
    x->bwd = is_bwd(a->op);
    x->chunk = a->chunk;
    x->mb = a->mb;
    x->from = is_send(a->op) ? s : a->peer;
    x->to = is_send(a->op) ? a->peer : s;
}

static tg_status push_order(struct run *r, char op, int c, int mb)
{
    struct tg_graph_action *n = realloc(r->order, (size_t)(r->norder + 1) * sizeof *n);
    if (!n) return tg_error(TG_ENOMEM, "out of host memory");
    r->order = n;
    r->order[r->norder++] = (struct tg_graph_action){op, c, mb};
    return TG_OK;
}

/* Runs action a of stage s; *blocked when it is a recv whose data has not come. */
static tg_status run_action(struct run *r, int s, const struct tg_sched_action *a, int *blocked)
{
    if (!is_comm(a->op)) TG_TRY(check_state(r, a));
    if (r->dry) {
        if (!is_comm(a->op)) {
            set_state(r, a);
            TG_TRY(push_order(r, "FBW"[a->op], a->chunk, a->mb));
            if (a->op == TG_SCHED_B && a->w) TG_TRY(push_order(r, 'W', a->chunk, a->mb));
            return TG_OK;
        }
        struct tg_sched_xfer x;
        xfer_of(a, s, &x);
        char *pst = &r->posted[(size_t)x.bwd * r->C * r->M + ix(r, a->chunk, a->mb)];
        if (is_send(a->op)) *pst = 1;
        else if (!*pst) *blocked = 1;
        else *pst = 0;
        return TG_OK;
    }

    if (a->op == TG_SCHED_F) {
        TG_TRY(do_forward(r, s, a));
        TG_TRY(sync_chunk(r, a->chunk));
    } else if (a->op == TG_SCHED_B) {
        TG_TRY(do_backward(r, s, a));
        TG_TRY(sync_chunk(r, a->chunk));
    } else if (a->op == TG_SCHED_W) {
        TG_TRY(do_wgrad(r, a));
        TG_TRY(sync_chunk(r, a->chunk));
    } else {
        struct tg_sched_xfer x;
        xfer_of(a, s, &x);
        tg_tensor **held = x.bwd ? &r->dx_out[ix(r, a->chunk, a->mb)] : &r->y_out[ix(r, a->chunk, a->mb)];
        if (is_send(a->op)) {
            if (!*held)
                return tg_error(TG_ESTATE, "nothing to send: %s chunk %d mb %d has not run on this stage (or it was sent already)",
                                x.bwd ? "B" : "F", a->chunk, a->mb);
            TG_TRY(r->tr->send(r->tr->ud, &x, *held));
            tg_tensor_free(*held);
            *held = NULL;
            if (tg_trace_on) r->xfer_span[(size_t)x.bwd * r->C * r->M + ix(r, a->chunk, a->mb)] = trace_transfer(&x);
        } else {
            tg_tensor *t = NULL;
            TG_TRY(r->tr->recv(r->tr->ud, &x, &t));
            if (!t) {
                *blocked = 1;
                return TG_OK;
            }
            /* lands where the consumer looks: chunk+1's input, or chunk-1's output gradient */
            tg_tensor **dst = x.bwd ? &r->dy_in[ix(r, a->chunk - 1, a->mb)] : &r->x_in[ix(r, a->chunk + 1, a->mb)];
            if (*dst) {
                tg_tensor_free(t);
                return tg_error(TG_ESTATE, "received twice");
            }
            *dst = t;
            int *xs = &r->xfer_span[(size_t)x.bwd * r->C * r->M + ix(r, a->chunk, a->mb)];
            tg_trace_close(*xs, NULL);
            *xs = -1;
        }
    }
    if (!is_comm(a->op)) set_state(r, a);
    return TG_OK;
}

/* Runs action idx (1-based) of stage s, in a span while tracing. */
static tg_status step(struct run *r, int s, int idx, int *blocked)
{
    const struct tg_sched_action *a = &r->p->actions[s - 1][idx - 1];
    *blocked = 0;
    if (r->dry || !tg_trace_on) return run_action(r, s, a, blocked);
    /* a W without work: the wgrad was not delayed, B computed it */
    int noop = a->op == TG_SCHED_W && !w_pending(r, a);
    tg_trace_set_stage(s);
    int sp = trace_action(a, s, idx, noop ? "\"noop\":true" : NULL);
    tg_status st = run_action(r, s, a, blocked);
    if (st == TG_OK && !*blocked) tg_trace_close(sp, NULL);
    else tg_trace_drop(sp);
    tg_trace_set_stage(0);
    return st;
}

/* "stage 2 action 1 (recv_fwd chunk 1 mb 1 from stage 1) waits for a send stage 1 never made (it has finished)" ... */
static tg_status deadlock(struct run *r, const int *pc)
{
    char msg[1024], d[96];
    size_t len = 0;
    int stuck = 0;
    for (int s = 1; s <= r->p->stages; s++) {
        if ((r->o && r->o->local && !r->o->local[s - 1]) || pc[s - 1] >= r->p->nactions[s - 1]) continue;
        const struct tg_sched_action *a = &r->p->actions[s - 1][pc[s - 1]];
        int q = a->peer;
        char why[96];
        if (pc[q - 1] >= r->p->nactions[q - 1])
            snprintf(why, sizeof why, "stage %d has finished without sending it", q);
        else
            snprintf(why, sizeof why, "stage %d waits at its action %d", q, pc[q - 1] + 1);
        int k = snprintf(msg + len, sizeof msg - len, "%sstage %d action %d (%s) waits for a send that has not happened (%s)",
                         stuck ? "; " : "", s, pc[s - 1] + 1, tg_sched_action_str(a, d, sizeof d), why);
        if (k > 0 && (size_t)k < sizeof msg - len) len += (size_t)k;
        stuck++;
    }
    return tg_error(TG_ESTATE, "schedule deadlock: no stage can move: %s", msg);
}

static tg_status run_all(struct run *r)
{
    const tg_sched_plan *p = r->p;
    int *pc = calloc((size_t)p->stages, sizeof *pc);
    if (!pc) return tg_error(TG_ENOMEM, "out of host memory");
    tg_status st = TG_OK;
    int progress = 1, left = 1;
    while (st == TG_OK && progress) {
        progress = 0;
        left = 0;
        for (int s = 1; s <= p->stages && st == TG_OK; s++) {
            if (r->o && r->o->local && !r->o->local[s - 1]) continue;
            while (pc[s - 1] < p->nactions[s - 1]) {
                int blocked;
                st = step(r, s, pc[s - 1] + 1, &blocked);
                if (st != TG_OK) {
                    char d[96];
                    tg_error_prefix(st, "stage %d action %d (%s)", s, pc[s - 1] + 1,
                                    tg_sched_action_str(&p->actions[s - 1][pc[s - 1]], d, sizeof d));
                    break;
                }
                if (blocked) break;
                pc[s - 1]++;
                progress = 1;
            }
            if (pc[s - 1] < p->nactions[s - 1]) left = 1;
        }
    }
    if (st == TG_OK && left) st = deadlock(r, pc);
    free(pc);
    return st;
}

static tg_status run_alloc(struct run *r, const tg_sched_plan *p)
{
    r->p = p;
    r->C = p->nchunks;
    r->M = p->microbatches;
    size_t n = (size_t)r->C * r->M;
    r->x_in = calloc(n, sizeof *r->x_in);
    r->dy_in = calloc(n, sizeof *r->dy_in);
    r->y_out = calloc(n, sizeof *r->y_out);
    r->dx_out = calloc(n, sizeof *r->dx_out);
    r->state = calloc(n, 1);
    r->xfer_span = malloc(2 * n * sizeof *r->xfer_span);
    r->posted = calloc(2 * n, 1);
    if (!r->x_in || !r->dy_in || !r->y_out || !r->dx_out || !r->state || !r->xfer_span || !r->posted)
        return tg_error(TG_ENOMEM, "out of host memory");
    for (size_t i = 0; i < 2 * n; i++) r->xfer_span[i] = -1;
    return TG_OK;
}

static void run_release(struct run *r)
{
    size_t n = (size_t)r->C * r->M;
    for (size_t i = 0; i < n; i++) {
        if (r->x_in) tg_tensor_free(r->x_in[i]);
        if (r->dy_in) tg_tensor_free(r->dy_in[i]);
        if (r->y_out) tg_tensor_free(r->y_out[i]);
        if (r->dx_out) tg_tensor_free(r->dx_out[i]);
    }
    free(r->x_in);
    free(r->dy_in);
    free(r->y_out);
    free(r->dx_out);
    free(r->state);
    free(r->xfer_span);
    free(r->posted);
}

static int running; /* a tg_sched_run is in progress */

tg_status tg_sched_run(const tg_sched_plan *p, const tg_sched_opts *o)
{
    TG_TRY(check_plan(p, o));
    if (running) return tg_error(TG_ESTATE, "schedule: another schedule is running (executors do not nest)");
    struct run r = {.o = o};
    struct tg_sched_transport local = {0};
    tg_status st = run_alloc(&r, p);
    if (st == TG_OK && !o->transport) st = tg_sched_transport_local(p->nchunks, p->microbatches, &local);
    r.tr = o->transport ? o->transport : &local;
    /* graphed sets replay from the start of their order */
    for (int c = 0; st == TG_OK && o->graphed && c < p->nchunks; c++)
        if (o->graphed[c]) tg_graphed_reset(o->graphed[c]);
    if (st == TG_OK) {
        running = 1;
        tg_trace_set_pid(o->trace_pid);
        st = run_all(&r);
        tg_trace_set_pid(-1);
        running = 0;
    }
    if (st == TG_OK && r.tr->finish) st = r.tr->finish(r.tr->ud);
    if (local.free) local.free(local.ud);
    run_release(&r);
    return st;
}

tg_status tg_sched_order(const tg_sched_plan *p, struct tg_graph_action **out, int *n)
{
    *out = NULL;
    *n = 0;
    TG_TRY(check_plan(p, NULL));
    struct run r = {.dry = 1};
    tg_status st = run_alloc(&r, p);
    if (st == TG_OK) st = run_all(&r);
    run_release(&r);
    if (st != TG_OK) {
        free(r.order);
        return st;
    }
    *out = r.order;
    *n = r.norder;
    return TG_OK;
}
