/* engine.c — steps, per-parameter wgrad bookkeeping, hook dispatch and the end-of-step hook check. */
#include "core/debug.h"
#include "core/ops_optim.h"
#include "trace/trace.h"
#include "nn/nn.h"

#include <string.h>

/* One engine per process: modules run on one host thread (pipeline stages
 * are processes), so this state is not locked. */
static struct {
    int open;            /* a step is open */
    int64_t count;       /* steps begun so far; the open step's index */
    int microbatches;    /* of the open step */
    int check;           /* hook check at step end */
    int quiet;           /* graph warm-up: wgrads neither recorded nor fired */
    int full;            /* full-iteration capture of a step of this many microbatches (0: none): hooks fire
                            while capturing, so their device work is captured */
    const void *owner;   /* who began the open step (the Lua state: tg_step_begin), an identity only */
    tg_capture_observer observer; /* told of wgrads issued while capturing */
    void *observer_ud;
    tg_param *live;      /* every parameter not yet freed, oldest first */
    tg_param *live_tail;
} eng = {.check = 1};

void tg_engine_link(tg_param *p)
{
    p->next_live = NULL;
    p->prev_live = eng.live_tail;
    if (eng.live_tail) eng.live_tail->next_live = p;
    else eng.live = p;
    eng.live_tail = p;
}

void tg_engine_unlink(tg_param *p)
{
    if (p->prev_live) p->prev_live->next_live = p->next_live;
    else if (eng.live == p) eng.live = p->next_live;
    if (p->next_live) p->next_live->prev_live = p->prev_live;
    else if (eng.live_tail == p) eng.live_tail = p->prev_live;
    p->next_live = p->prev_live = NULL;
}

static int hook_depth; /* wgrad hooks running now (nested: a hook's own work fired more) */
static int pre_depth;  /* forward pre-hooks running now */
int tg_hooks_running(void) { return hook_depth > 0; }

tg_status tg_engine_hook_status(tg_status st)
{
    if (st == TG_OK) return TG_OK;
    if ((int)st < (int)TG_OK || (int)st > (int)TG_ELUA)
        return tg_error(TG_EINVAL, "the hook returned %d, which is not a tg_status", (int)st);
    if (!tg_last_error()[0])
        return tg_error(st, "the hook failed (%s) without a message (hooks report failures with tg_error)",
                        tg_status_name(st));
    return st;
}

/* Steps are begun and ended by the code that drives the microbatches, never from a hook: a hook runs inside a
 * backward or forward, whose step bookkeeping it would cut in two. */
static tg_status not_in_hook(const char *what)
{
    if (hook_depth) return tg_error(TG_ESTATE, "%s called from a wgrad hook (steps begin and end outside hooks)", what);
    if (pre_depth)
        return tg_error(TG_ESTATE, "%s called from a forward pre-hook (steps begin and end outside hooks)", what);
    return TG_OK;
}

int tg_step_open(void) { return eng.open; }
int64_t tg_step_index(void) { return eng.open ? eng.count : 0; }
int tg_step_microbatches(void) { return eng.open ? eng.microbatches : 0; }
void tg_hook_check_set(int on) { eng.check = on != 0; }
int tg_hook_check_get(void) { return eng.check; }

/* Lists (into msg) the leaf modules owning live parameters whose wgrad store holds work queued in step `step`
 * (0: outside steps), with the microbatches; returns how many modules. */
static int queued_in(int64_t step, char *msg, size_t cap)
{
    size_t len = 0;
    int n = 0;
    msg[0] = 0;
    for (tg_param *p = eng.live; p; p = p->next_live) {
        tg_module *m = p->owner;
        if (!m || !m->wq_head) continue;
        int seen = 0; /* one entry per module (its first parameter) */
        for (tg_param *q = eng.live; q != p && !seen; q = q->next_live) seen = q->owner == m;
        if (seen) continue;
        char mbs[96] = "";
        size_t ml = 0;
        for (struct tg_saved *s = m->wq_head; s; s = s->next)
            if (s->step == step && ml + 12 < sizeof mbs)
                ml += (size_t)snprintf(mbs + ml, sizeof mbs - ml, "%s%d", ml ? ", " : "", s->mb);
        if (!ml) continue;
        char label[160];
        if (len + 64 < cap)
            len += (size_t)snprintf(msg + len, cap - len, "%s%s (microbatch %s)", n ? ", " : "",
                                    tg_module_label(m, label, sizeof label), mbs);
        n++;
    }
    return n;
}

tg_status tg_step_begin_by(int microbatches, const void *owner)
{
    char q[600];
    TG_TRY(not_in_hook("step_begin"));
    if (eng.open && eng.owner != owner)
        return tg_error(TG_ESTATE,
                        "step_begin: step %lld is open in another Lua state of this process (another runtime): the "
                        "process has one step at a time, shared by its runtimes (end that step there, or free that "
                        "runtime, first)",
                        (long long)eng.count);
    if (eng.open)
        return tg_error(TG_ESTATE, "step_begin: step %lld is still open (call step_end first)", (long long)eng.count);
    if (microbatches < 1) return tg_error(TG_EINVAL, "step_begin: microbatches must be >= 1 (got %d)", microbatches);
    if (queued_in(0, q, sizeof q))
        return tg_error(TG_ESTATE,
                        "step_begin: delayed wgrads queued outside steps have not run: %s (run their backward_dw, or "
                        "drop them with drop_saved(), first)",
                        q);
    eng.open = 1;
    eng.owner = owner;
    eng.count++;
    eng.microbatches = microbatches;
    return TG_OK;
}

tg_status tg_step_begin(int microbatches) { return tg_step_begin_by(microbatches, NULL); }

void tg_step_abandon(const void *owner)
{
    if (!eng.open || eng.owner != owner) return;
    /* what the step left (delayed wgrads queued in it, contexts its forwards saved) would fail or misplace the next
       step's work, as after a failed schedule run: dropped. The owner's modules are usually gone already (a Lua
       state's modules are collected before its step) */
    for (tg_param *p = eng.live; p; p = p->next_live)
        if (p->owner) tg_module_drop_step(p->owner, eng.count);
    eng.open = 0;
    eng.owner = NULL;
}

/* Grows p's per-microbatch counters to hold n entries (new entries zero). */
static tg_status counters_reserve(tg_param *p, int n)
{
    if (n <= p->fired_cap) return TG_OK;
    int cap = p->fired_cap ? p->fired_cap : 4;
    while (cap < n) cap *= 2;
    int *c = realloc(p->contrib_mb, (size_t)cap * sizeof *c);
    if (!c) return tg_error(TG_ENOMEM, "out of host memory");
    p->contrib_mb = c;
    int *f = realloc(p->fired_mb, (size_t)cap * sizeof *f);
    if (!f) return tg_error(TG_ENOMEM, "out of host memory");
    p->fired_mb = f;
    memset(c + p->fired_cap, 0, (size_t)(cap - p->fired_cap) * sizeof *c);
    memset(f + p->fired_cap, 0, (size_t)(cap - p->fired_cap) * sizeof *f);
    p->fired_cap = cap;
    return TG_OK;
}

/* Outside steps, microbatch numbers are labels rather than a range 1..M: p's counters keep one slot per distinct
 * microbatch seen, so a large number costs no more memory than a small one. */
static tg_status outside_slot(tg_param *p, int mb, int *slot)
{
    for (int i = 0; i < p->nslots; i++)
        if (p->slot_mb[i] == mb) {
            *slot = i;
            return TG_OK;
        }
    TG_TRY(counters_reserve(p, p->nslots + 1));
    int *a = realloc(p->slot_mb, (size_t)p->fired_cap * sizeof *a);
    if (!a) return tg_error(TG_ENOMEM, "out of host memory");
    p->slot_mb = a;
    p->slot_mb[p->nslots] = mb;
    *slot = p->nslots++;
    return TG_OK;
}

/* The counters of p belong to the open step (key = its index) or to "outside
 * steps" (key 0); they start from zero whenever the key changes. */
static void counters_sync(tg_param *p)
{
    int64_t key = eng.open ? eng.count : 0;
    if (p->step_seen == key) return;
    p->step_seen = key;
    p->contributed = 0;
    p->fired = 0;
    p->nslots = 0;
    if (p->fired_cap) {
        memset(p->contrib_mb, 0, (size_t)p->fired_cap * sizeof *p->contrib_mb);
        memset(p->fired_mb, 0, (size_t)p->fired_cap * sizeof *p->fired_mb);
    }
}

double tg_param_wgrad_accumulate(const tg_param *p)
{
    /* Captured work replays with the value baked in, so graphs always
     * accumulate (the grad buffers are zeroed at the start of a step). */
    if (!eng.open || eng.quiet || (tg_device_capturing(tg_tensor_device(p->data)) && !eng.full)) return 1.0;
    if (p->step_seen != eng.count) return 0.0;
    return p->contributed > 0 ? 1.0 : 0.0;
}

void tg_engine_set_capture_observer(tg_capture_observer fn, void *ud)
{
    eng.observer = fn;
    eng.observer_ud = ud;
}

void tg_engine_set_quiet(int on) { eng.quiet = on != 0; }
void tg_engine_set_full_capture(int microbatches) { eng.full = microbatches > 0 ? microbatches : 0; }
int tg_engine_full_capture(void) { return eng.full; }

/* Counts one contribution of p for mb and, when mb is complete, counts a firing
 * and runs p's hooks (hooks = 0: counts only, for the replay of a full-iteration
 * capture whose hooks' device work is in the graph). */
static tg_status wgrad_count(tg_param *p, int mb, int hooks)
{
    if (mb < 1) return tg_error(TG_EINVAL, "wgrad of %s: microbatch %d (microbatches count from 1)", p->name, mb);
    if (eng.open && mb > eng.microbatches)
        return tg_error(TG_EINVAL, "wgrad of %s for microbatch %d, but step %lld has %d microbatches", p->name, mb,
                        (long long)eng.count, eng.microbatches);
    counters_sync(p);
    int slot = mb - 1;
    if (eng.open) TG_TRY(counters_reserve(p, eng.microbatches));
    else TG_TRY(outside_slot(p, mb, &slot));
    p->contributed++;
    int per_mb = p->contributors > 0 ? p->contributors : 1;
    if (++p->contrib_mb[slot] % per_mb != 0) return TG_OK; /* more contributions of mb to come */
    p->fired++;
    p->fired_mb[slot]++;
    if (!hooks) return TG_OK;
    /* Outside steps the engine knows of no later microbatch: each firing is the last. */
    tg_hook_info info = {.microbatch = mb,
                         .last = eng.open ? p->fired == eng.microbatches : 1,
                         .chunk = p->owner ? p->owner->opts.chunk : 1,
                         .step = tg_step_index()};
    tg_status st = TG_OK;
    int sp = -1;
    if (tg_trace_on && p->nhooks) { /* one host span per dispatch (on the stage's track inside the executor) */
        char name[160];
        snprintf(name, sizeof name, "hooks %s", p->name);
        struct tg_trace_about a = {.cat = "hook", .chunk = info.chunk, .mb = mb, .step = info.step};
        sp = tg_trace_open(NULL, TG_TRACK_HOST, name, &a);
    }
    p->dispatching++;
    hook_depth++;
    for (int i = 0; i < p->nhooks && st == TG_OK; i++) {
        tg_error_clear();
        st = tg_engine_hook_status(p->hooks[i].fn(p->hooks[i].ud, p, &info));
        if (st != TG_OK) tg_error_prefix(st, "wgrad hook %d of %s (microbatch %d)", i + 1, p->name, mb);
    }
    p->dispatching--;
    hook_depth--;
    tg_trace_close(sp, NULL);
    return st;
}


/* ------------------------------------------------------------------ captures outside the graph layer
 * Module work captured with the plain stream capture (tg_stream_begin_capture,
 * tg.stream.capture) keeps the hook contract at replay: the graph carries the
 * forwards and wgrad contributions issued while it was recorded; before each
 * replay the wgrad targets whose next contribution is the first of the open
 * step are zeroed (captured wgrads accumulate), and after it the modules count
 * as run in the step and every recorded contribution is reported in capture
 * order, so hooks fire and the step check counts replays. */
struct captured {
    tg_param **wp;      /* wgrad contributions, capture order (references) */
    int *wmb;
    int nw, wcap;
    tg_param **tp;      /* distinct parameters written (references) */
    tg_tensor **target; /* their wgrad targets at capture (handles) */
    int *nhooks;        /* full capture: their hook count at their last wgrad in the capture */
    int *hook_id;       /* and their newest hook's id (ids only grow: a hook added or removed since changes one) */
    int nt, tcap;
    tg_tensor **zero;   /* scratch for the zeroing launch (nt entries) */
    tg_module **fwd;    /* modules whose forward was captured (references) */
    int nf, fcap;
    tg_module **pre;    /* modules with forward pre-hooks whose forward was captured (references) */
    int *pre_mb;        /* and its microbatch, capture order */
    int np, pcap;
    tg_param *orphan;   /* the first parameter whose wgrad was captured without its module's forward (reference), */
    int orphan_mb;      /* and its microbatch: the graph is refused at replay */
    int skip_hooks;     /* TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY at capture (tests) */
    int full;           /* a full-iteration capture (its microbatches; 0: not one): hooks and pre-hooks ran while capturing, their device
                           work and the first-contribution overwrites are in the graph; a replay only counts */
};

static void captured_free(void *ud)
{
    struct captured *c = ud;
    for (int i = 0; i < c->nw; i++) tg_param_release(c->wp[i]);
    for (int i = 0; i < c->nt; i++) {
        tg_param_release(c->tp[i]);
        tg_tensor_free(c->target[i]);
    }
    for (int i = 0; i < c->nf; i++) tg_module_release(c->fwd[i]);
    for (int i = 0; i < c->np; i++) tg_module_release(c->pre[i]);
    if (c->orphan) tg_param_release(c->orphan);
    free(c->pre);
    free(c->pre_mb);
    free(c->wp);
    free(c->wmb);
    free(c->tp);
    free(c->target);
    free(c->nhooks);
    free(c->hook_id);
    free(c->zero);
    free(c->fwd);
    free(c);
}

static int grow(void **arr, int *cap, int n, size_t size)
{
    if (n < *cap) return 1;
    int c = *cap ? 2 * *cap : 8;
    void *a = realloc(*arr, (size_t)c * size);
    if (!a) return 0;
    *arr = a;
    *cap = c;
    return 1;
}

static tg_status captured_before(void *ud, tg_stream *s);
static tg_status captured_after(void *ud, tg_stream *s);

/* The record of the graph dev captures into (made on first use). */
static tg_status captured_of(tg_device dev, const char *what, struct captured **out)
{
    *out = NULL;
    tg_graph *g = tg_device_capture_graph(dev);
    if (!g) return tg_error(TG_ESTATE, "%s while capturing: no graph is being recorded", what);
    if (g->host.free_ud == captured_free) {
        *out = g->host.ud;
        return TG_OK;
    }
    if (g->host.before || g->host.after)
        return tg_error(TG_ESTATE, "%s while capturing: the graph carries other host work", what);
    struct captured *c = calloc(1, sizeof *c);
    if (!c) return tg_error(TG_ENOMEM, "out of host memory");
    c->skip_hooks = tg_debug_get(TG_DEBUG_SKIP_HOOKS_AFTER_REPLAY);
    c->full = eng.full;
    g->host = (struct tg_graph_host){.before = captured_before, .after = captured_after, .free_ud = captured_free, .ud = c};
    *out = c;
    return TG_OK;
}

static tg_status record_wgrad(tg_param *p, int mb)
{
    struct captured *c;
    TG_TRY(captured_of(tg_tensor_device(p->data), p->name, &c));
    if (mb < 1) return tg_error(TG_EINVAL, "wgrad of %s: microbatch %d (microbatches count from 1)", p->name, mb);
    /* a backward captured without its forward reads the saved input of a forward outside the graph: each replay
       would compute the gradient of that one input, whatever ran since (eagerly, backward before forward fails).
       Noted here, refused at replay: capturing it to look at the graph (its size) is fine */
    int fwd = !p->owner;
    for (int i = 0; i < c->nf && !fwd; i++) fwd = c->fwd[i] == p->owner;
    if (!fwd && !c->orphan) {
        c->orphan = tg_param_retain(p);
        c->orphan_mb = mb;
    }
    int known = -1;
    for (int i = 0; i < c->nt && known < 0; i++)
        if (c->tp[i] == p) known = i;
    if (known >= 0) { /* the hooks that fired at its last wgrad are the ones whose device work is in the graph */
        c->nhooks[known] = p->nhooks;
        c->hook_id[known] = p->nhooks ? p->hooks[p->nhooks - 1].id : 0;
    }
    if (known < 0) {
        int tcap = c->tcap, hcap = c->tcap, icap = c->tcap;
        if (!grow((void **)&c->tp, &tcap, c->nt, sizeof *c->tp) || !grow((void **)&c->nhooks, &hcap, c->nt, sizeof *c->nhooks) ||
            !grow((void **)&c->hook_id, &icap, c->nt, sizeof *c->hook_id) ||
            !grow((void **)&c->target, &c->tcap, c->nt, sizeof *c->target))
            return tg_error(TG_ENOMEM, "out of host memory");
        c->nhooks[c->nt] = p->nhooks;
        c->hook_id[c->nt] = p->nhooks ? p->hooks[p->nhooks - 1].id : 0;
        TG_TRY(tg_tensor_ref(tg_param_wgrad_target(p), &c->target[c->nt]));
        c->tp[c->nt++] = tg_param_retain(p);
        tg_tensor **z = realloc(c->zero, (size_t)c->nt * sizeof *z);
        if (!z) return tg_error(TG_ENOMEM, "out of host memory");
        c->zero = z;
    }
    int cap = c->wcap;
    if (!grow((void **)&c->wp, &cap, c->nw, sizeof *c->wp)) return tg_error(TG_ENOMEM, "out of host memory");
    if (!grow((void **)&c->wmb, &c->wcap, c->nw, sizeof *c->wmb)) return tg_error(TG_ENOMEM, "out of host memory");
    c->wp[c->nw] = tg_param_retain(p);
    c->wmb[c->nw++] = mb;
    return TG_OK;
}

tg_status tg_engine_note_forward(tg_module *m)
{
    if (!tg_device_capturing(m->opts.device) || eng.full) m->forward_step = tg_step_index();
    if (!tg_device_capturing(m->opts.device)) return TG_OK;
    if (eng.observer || eng.quiet) return TG_OK; /* the graph layer's capture: it marks forwards at replay */
    char label[160];
    struct captured *c;
    TG_TRY(captured_of(m->opts.device, tg_module_label(m, label, sizeof label), &c));
    for (int i = 0; i < c->nf; i++)
        if (c->fwd[i] == m) return TG_OK;
    /* m's first forward in this graph: anything in its wgrad store was queued before the capture, and the captured
       backward_dw would take it (FIFO) instead of the captured microbatch's, swapping the two gradients */
    if (m->wq_head) {
        char mbs[96] = "";
        size_t ml = 0;
        for (struct tg_saved *q = m->wq_head; q && ml + 12 < sizeof mbs; q = q->next)
            ml += (size_t)snprintf(mbs + ml, sizeof mbs - ml, "%s%d", ml ? ", " : "", q->mb);
        return tg_error(TG_ESTATE,
                        "forward captured while the module's wgrad store holds delayed wgrads queued before the "
                        "capture (microbatch %s): the captured backward_dw would compute those instead of the "
                        "captured microbatch's (run their backward_dw, or drop them with drop_saved(), before capturing)",
                        mbs);
    }
    if (!grow((void **)&c->fwd, &c->fcap, c->nf, sizeof *c->fwd)) return tg_error(TG_ENOMEM, "out of host memory");
    c->fwd[c->nf++] = tg_module_retain(m);
    return TG_OK;
}

/* Runs m's forward pre-hooks for mb, in a host span when tracing. */
static tg_status pre_fire(tg_module *m, int mb)
{
    char label[160];
    tg_forward_info info = {.microbatch = mb, .chunk = m->opts.chunk, .step = tg_step_index()};
    int sp = -1;
    if (tg_trace_on) {
        char name[200];
        snprintf(name, sizeof name, "pre-hooks %s", m->name && m->name[0] ? m->name : m->vt->type);
        struct tg_trace_about a = {.cat = "hook", .chunk = info.chunk, .mb = mb, .step = info.step};
        sp = tg_trace_open(NULL, TG_TRACK_HOST, name, &a);
    }
    tg_status st = TG_OK;
    if (m->pre_dispatching) { /* a pre-hook called its own module's forward: it would recurse without end */
        tg_trace_close(sp, NULL);
        return tg_error(TG_ESTATE,
                        "%s forward (microbatch %d) called from one of its own forward pre-hooks: the call would run "
                        "the pre-hooks again without end",
                        tg_module_label(m, label, sizeof label), mb);
    }
    m->pre_dispatching++;
    pre_depth++;
    for (int i = 0; i < m->npre && st == TG_OK; i++) {
        tg_error_clear();
        st = tg_engine_hook_status(m->pre_hooks[i].fn(m->pre_hooks[i].ud, m, &info));
        if (st != TG_OK)
            tg_error_prefix(st, "forward pre-hook %d of %s (microbatch %d)", i + 1, tg_module_label(m, label, sizeof label), mb);
    }
    m->pre_dispatching--;
    pre_depth--;
    tg_trace_close(sp, NULL);
    return st;
}

tg_status tg_engine_forward_pre(tg_module *m, int mb)
{
    if (!m->npre || eng.quiet) return TG_OK;
    /* a full-iteration capture runs them now: their device work (a gather) is captured */
    if (!tg_device_capturing(m->opts.device) || (eng.full && !eng.observer)) return pre_fire(m, mb);
    if (eng.observer) return TG_OK; /* the graph layer's capture: its F replays run them */
    char label[160];
    struct captured *c;
    TG_TRY(captured_of(m->opts.device, tg_module_label(m, label, sizeof label), &c));
    int cap = c->pcap;
    if (!grow((void **)&c->pre, &cap, c->np, sizeof *c->pre) || !grow((void **)&c->pre_mb, &c->pcap, c->np, sizeof *c->pre_mb))
        return tg_error(TG_ENOMEM, "out of host memory");
    c->pre[c->np] = tg_module_retain(m);
    c->pre_mb[c->np++] = mb;
    return TG_OK;
}

static tg_status captured_before(void *ud, tg_stream *s)
{
    (void)s;
    struct captured *c = ud;
    char a[64];
    if (c->full && !eng.open)
        return tg_error(TG_ESTATE, "replay of a full-iteration capture outside a step (it holds a whole step: open one of %d microbatches first)",
                        c->full);
    if (c->full && eng.microbatches != c->full)
        return tg_error(TG_EINVAL, "replay of a full-iteration capture of %d microbatches in a step of %d", c->full,
                        eng.microbatches);
    if (c->orphan) {
        char label[160] = "its module";
        if (c->orphan->owner) tg_module_label(c->orphan->owner, label, sizeof label);
        return tg_error(TG_ESTATE,
                        "replay of a graph that captured the wgrad of %s (%s, microbatch %d) without the module's "
                        "forward: it would replay the gradient of the input a forward outside the graph saved (capture "
                        "the forward and the backward together)",
                        c->orphan->name, label, c->orphan_mb);
    }
    for (int i = 0; i < c->np; i++) TG_TRY(pre_fire(c->pre[i], c->pre_mb[i]));
    for (int i = 0; i < c->nw; i++)
        if (eng.open && c->wmb[i] > eng.microbatches)
            return tg_error(TG_EINVAL, "replay of a graph that computes the wgrad of %s for microbatch %d, but step %lld has %d microbatches",
                            c->wp[i]->name, c->wmb[i], (long long)eng.count, eng.microbatches);
    int nz = 0;
    for (int i = 0; i < c->nt; i++) {
        tg_param *p = c->tp[i];
        int id = p->nhooks ? p->hooks[p->nhooks - 1].id : 0;
        if (c->full && (p->nhooks != c->nhooks[i] || id != c->hook_id[i]))
            return tg_error(TG_ESTATE,
                            "replay of a full-iteration capture: the hooks of %s changed since the capture (%d then, %d "
                            "now); the captured hooks' device work is baked into the graph and a new hook would never "
                            "run (capture the step again)",
                            p->name, c->nhooks[i], p->nhooks);
        if (!tg_tensor_same_memory(tg_param_wgrad_target(p), c->target[i]))
            return tg_error(TG_ESTATE, "replay: the wgrad target of %s (%s) was replaced after the graph was captured (capture again)",
                            p->name, tg_tensor_shape_str(c->target[i], a, sizeof a));
        if (!c->full && tg_param_wgrad_accumulate(p) == 0.0) c->zero[nz++] = c->target[i];
    }
    return tg_zero_multi(c->zero, nz);
}

static tg_status captured_after(void *ud, tg_stream *s)
{
    (void)s;
    struct captured *c = ud;
    for (int i = 0; i < c->nf; i++) {
        c->fwd[i]->forward_step = tg_step_index();
        c->fwd[i]->exec_mode = "captured";
    }
    if (c->skip_hooks) return TG_OK; /* TransformerEngine's bug, on purpose (tests) */
    for (int i = 0; i < c->nw; i++) TG_TRY(wgrad_count(c->wp[i], c->wmb[i], !c->full));
    return TG_OK;
}

tg_status tg_param_wgrad_done(tg_param *p, int mb)
{
    p->grad_written = 1;
    if (eng.quiet) return TG_OK;
    if (tg_device_capturing(tg_tensor_device(p->data))) {
        if (eng.observer) return eng.observer(eng.observer_ud, p, mb);
        TG_TRY(record_wgrad(p, mb));
        return eng.full ? wgrad_count(p, mb, 1) : TG_OK;
    }
    return wgrad_count(p, mb, 1);
}

/* "[1,0,1,1]" of p's firings per microbatch of the open step. */
static void format_counts(const tg_param *p, int m, char *buf, size_t n)
{
    size_t len = 0;
    len += (size_t)snprintf(buf + len, n - len, "[");
    for (int i = 0; i < m && len < n; i++) {
        int f = p->step_seen == eng.count && i < p->fired_cap ? p->fired_mb[i] : 0;
        len += (size_t)snprintf(buf + len, n - len, "%s%d", i ? "," : "", f);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
}

static int fired_once_each(const tg_param *p, int m)
{
    for (int i = 0; i < m; i++) {
        int f = p->step_seen == eng.count && i < p->fired_cap ? p->fired_mb[i] : 0;
        if (f != 1) return 0;
    }
    return 1;
}

static void mode_of(const tg_module *m, char *buf, size_t n)
{
    snprintf(buf, n, "%s, %s", m->exec_mode ? m->exec_mode : "eager",
             m->opts.delay_wgrad ? "delayed wgrad" : "wgrad not delayed");
}

tg_status tg_step_end_by(const void *owner)
{
    TG_TRY(not_in_hook("step_end"));
    if (!eng.open) return tg_error(TG_ESTATE, "step_end: no step is open (call step_begin first)");
    if (eng.owner != owner)
        return tg_error(TG_ESTATE,
                        "step_end: step %lld was begun by another Lua state of this process (another runtime), which "
                        "ends it (the process has one step at a time, shared by its runtimes)",
                        (long long)eng.count);
    char q[600];
    if (queued_in(eng.count, q, sizeof q))
        return tg_error(TG_ESTATE,
                        "step_end: step %lld has delayed wgrads that have not run: %s (run their backward_dw before "
                        "step_end, or drop them with drop_saved(); the step stays open)",
                        (long long)eng.count, q);
    int m = eng.microbatches;
    char msg[900], one[512], mode[64], first_mode[64] = "", counts[160];
    size_t len = 0;
    int bad = 0, listed = 0;
    for (tg_param *p = eng.live; eng.check && p; p = p->next_live) {
        if (!p->nhooks || !p->owner || p->owner->forward_step != eng.count || fired_once_each(p, m)) continue;
        bad++;
        mode_of(p->owner, mode, sizeof mode);
        if (!first_mode[0]) memcpy(first_mode, mode, sizeof mode);
        format_counts(p, m, counts, sizeof counts);
        int same = strcmp(mode, first_mode) == 0;
        char expected[64] = "";
        if (!listed) snprintf(expected, sizeof expected, " (expected once per microbatch 1..%d)", m);
        snprintf(one, sizeof one, "%s%s fired %s%s%s%s%s", listed ? ", " : "", p->name, counts, expected,
                 same ? "" : " (mode: ", same ? "" : mode, same ? "" : ")");
        if (len + strlen(one) + 32 < sizeof msg) {
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s", one);
            listed++;
        }
    }
    eng.open = 0;
    eng.owner = NULL;
    if (!bad) return TG_OK;
    if (listed < bad) snprintf(msg + len, sizeof msg - len, ", and %d more", bad - listed);
    return tg_error(TG_ESTATE, "hook check failed at step %lld (mode: %s): %s", (long long)eng.count, first_mode, msg);
}

tg_status tg_step_end(void) { return tg_step_end_by(NULL); }
