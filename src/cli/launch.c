/* launch.c — `tegraph run -n N`: local ranks (forked with an NCCL id on GPUs, mpirun on CPUs), rank-prefixed stderr, failure stops the job. */
#include "config.h"
#include "tegraph.h"
#include "cli/launch.h"

#ifdef TG_HAVE_MPI
#include <mpi.h> /* OPEN_MPI: which mpirun flags exist */
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define GRACE_S 5.0 /* after a rank fails: how long the others get to stop before SIGKILL */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}


/* ------------------------------------------------------------------ per-rank setup */
static pid_t prefixer = -1;
static int saved_stderr = -1;

/* Copies in to out, "[rank R] " before each line, one write per line. */
static void pump(int in, int out, const char *prefix)
{
    char buf[4096], line[8192];
    size_t plen = strlen(prefix), len = plen;
    memcpy(line, prefix, plen);
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) {
            line[len++] = buf[i];
            if (buf[i] == '\n' || len == sizeof line) {
                (void)!write(out, line, len);
                len = plen;
            }
        }
    }
    if (len > plen) {
        line[len++] = '\n';
        (void)!write(out, line, len);
    }
}

void tg_cli_rank_begin(void)
{
    int rank = tg_launch_env(TG_ENV_RANK, -1), size = tg_launch_env(TG_ENV_WORLD_SIZE, 0);
    if (rank < 0 || size == 1) return;
    const char *off = getenv("TG_RANK_PREFIX");
    int fds[2];
    if (!(off && strcmp(off, "0") == 0) && pipe(fds) == 0) {
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            /* the prefixer: drains the rank's stderr until every writer is gone */
            char prefix[32];
            snprintf(prefix, sizeof prefix, "[rank %d] ", rank);
            signal(SIGINT, SIG_IGN);
            signal(SIGTERM, SIG_IGN);
            close(fds[1]);
            close(0);
            close(1);
            pump(fds[0], 2, prefix);
            _exit(0);
        }
        close(fds[0]);
        if (pid > 0) {
            saved_stderr = dup(2);
            dup2(fds[1], 2);
            prefixer = pid;
        }
        close(fds[1]);
    }
    /* one GPU per local rank (CUDA_VISIBLE_DEVICES is respected by the count) */
    const char *dev = getenv("TG_DEVICE");
    int ndev = size > 1 ? tg_device_count(TG_CUDA) : 0;
    if (ndev > 0 && (!dev || strncmp(dev, "cuda", 4) == 0)) {
        char name[32];
        snprintf(name, sizeof name, "cuda:%d", tg_launch_env(TG_ENV_LOCAL_RANK, rank) % ndev);
        setenv("TG_DEVICE", name, 1);
    }
}

void tg_cli_rank_end(int failed)
{
    if (prefixer > 0) {
        fflush(stderr);
        dup2(saved_stderr, 2); /* closes this process's end of the pipe: the prefixer drains and exits */
        close(saved_stderr);
        saved_stderr = -1;
        for (int i = 0; i < 200 && waitpid(prefixer, NULL, WNOHANG) == 0; i++) sleep_ms(10);
        prefixer = -1;
    }
    if (!failed) return;
    int rank = tg_launch_env(TG_ENV_RANK, -1), size = tg_launch_env(TG_ENV_WORLD_SIZE, 0);
    if (rank >= 0 && size != 1) {
        fprintf(stderr, "tegraph: rank %d failed; stopping the job\n", rank);
        fflush(stderr);
    }
    tg_world_abort(1); /* under MPI this ends every rank (and does not return) */
}

/* ------------------------------------------------------------------ the launcher */
static int launch_error(const char *fmt, const char *a, int code)
{
    fputs("tegraph run -n: ", stderr);
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    return code;
}

/* The running executable (the real binary, not a libtool wrapper). */
static const char *self_exe(const char *argv0)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return argv0;
    path[n] = '\0';
    return path;
}

static const char *const own_vars[] = {"TG_RANK", "TG_WORLD_SIZE", "TG_LOCAL_RANK", "TG_LOCAL_WORLD_SIZE",
                                       "TG_NCCL_ID", "TG_RANK_PREFIX", "TG_DEPARTED_FD", NULL};

static int is_own_var(const char *kv, int drop_device)
{
    for (const char *const *v = own_vars; *v; v++) {
        size_t n = strlen(*v);
        if (strncmp(kv, *v, n) == 0 && kv[n] == '=') return 1;
    }
    return drop_device && strncmp(kv, "TG_DEVICE=", 10) == 0;
}

static char *fmt_var(const char *name, const char *fmt, int v)
{
    char val[32], *s;
    snprintf(val, sizeof val, fmt, v);
    size_t n = strlen(name) + strlen(val) + 2;
    s = malloc(n);
    if (s) snprintf(s, n, "%s=%s", name, val);
    return s;
}

/* The environment of rank r: ours, minus stale rank variables, plus its own
 * (entries from *own on were allocated here: free_rank_env frees them). */
static char **rank_env(int r, int n, const char *nccl_id, int ndev, int departed_fd, size_t *own)
{
    size_t count = 0;
    while (environ[count]) count++;
    char **env = calloc(count + 10, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < count; i++)
        if (!is_own_var(environ[i], ndev > 0)) env[k++] = environ[i];
    *own = k;
    env[k++] = fmt_var("TG_RANK", "%d", r);
    env[k++] = fmt_var("TG_WORLD_SIZE", "%d", n);
    env[k++] = fmt_var("TG_LOCAL_RANK", "%d", r);
    env[k++] = fmt_var("TG_LOCAL_WORLD_SIZE", "%d", n);
    env[k++] = fmt_var("TG_RANK_PREFIX", "%d", 0); /* the launcher prefixes (and drains) their stderr */
    if (ndev > 0) env[k++] = fmt_var("TG_DEVICE", "cuda:%d", r % ndev);
    if (departed_fd >= 0) env[k++] = fmt_var("TG_DEPARTED_FD", "%d", departed_fd);
    if (nccl_id) {
        size_t len = strlen(nccl_id) + 12;
        char *s = malloc(len);
        if (s) snprintf(s, len, "TG_NCCL_ID=%s", nccl_id);
        env[k++] = s;
    }
    for (size_t i = 0; i < k; i++)
        if (!env[i]) return NULL;
    return env;
}

static void free_rank_env(char **env, size_t own)
{
    if (!env) return;
    for (size_t i = own; env[i]; i++) free(env[i]);
    free(env);
}

static void describe_status(int status, char *buf, size_t n)
{
    if (WIFEXITED(status)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, n, "stopped (status 0x%x)", status);
}

static volatile sig_atomic_t got_signal;
static void on_signal(int sig) { got_signal = sig; }

/* Whether a signal the launcher got is to be passed on: not the same one again within a second. One stop
 * often comes twice — `timeout` signals its child and then its process group, a batch system the whole job —
 * and a rank takes a second signal as "end now", before its checkpoint is written. */
static int signal_is_new(int sig)
{
    static double last_int = -10, last_term = -10, last_other = -10;
    double *last = sig == SIGINT ? &last_int : sig == SIGTERM ? &last_term : &last_other;
    double t = now_s();
    int fresh = t - *last >= 1.0;
    *last = t;
    return fresh;
}

/* The launcher relays each rank's stderr, "[rank R] " before every line, so
 * nothing is lost when a rank is stopped and everything is out when it exits. */
struct relay {
    int fd;        /* read end of the rank's stderr pipe; -1 once drained */
    size_t len;    /* bytes of the current line in buf (after the prefix) */
    size_t plen;
    char buf[4096];
};

static void relay_flush(struct relay *x, int newline)
{
    if (x->len == x->plen) return;
    if (newline) x->buf[x->len++] = '\n';
    (void)!write(2, x->buf, x->len);
    x->len = x->plen;
}

/* Reads what is there; returns 0 at end of file. */
static int relay_read(struct relay *x)
{
    char tmp[4096];
    ssize_t n = read(x->fd, tmp, sizeof tmp);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    for (ssize_t i = 0; i < n; i++) {
        x->buf[x->len++] = tmp[i];
        if (tmp[i] == '\n' || x->len == sizeof x->buf - 1) relay_flush(x, 0);
    }
    return n > 0;
}

/* Forks the n ranks and supervises them. */
static int launch_fork(int n, const char *exe, char **child_argv, int use_gpus)
{
    char id[2 * 128 + 1];
    const char *nccl_id = NULL;
    int ndev = use_gpus ? tg_device_count(TG_CUDA) : 0;
    const char *pre = getenv("TG_RANK_PREFIX");
    int prefix = !(pre && strcmp(pre, "0") == 0);
    if (use_gpus) {
        char msg[64];
        if (n > ndev) {
            snprintf(msg, sizeof msg, "%d", ndev);
            return launch_error("%s CUDA device(s) visible (CUDA_VISIBLE_DEVICES): fewer than the ranks asked for", msg,
                                2);
        }
        /* the parent holds the id's bootstrap root until the ranks have joined */
        if (tg_world_nccl_id(id, sizeof id) != TG_OK) return launch_error("%s", tg_last_error(), 1);
        nccl_id = id;
    }
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *alive = calloc((size_t)n, sizeof *alive);
    struct relay *rel = calloc((size_t)n, sizeof *rel);
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    if (!pids || !alive || !rel || !pfd) return launch_error("%s", "out of memory", 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    fflush(stdout);
    fflush(stderr);
    /* each rank's pipe of departures: "R\n" when rank R exits 0 while it still runs */
    int *tell = calloc((size_t)n, sizeof *tell);
    if (!tell) return launch_error("%s", "out of memory", 1);
    signal(SIGPIPE, SIG_IGN);
    int started = 0, rc = 0;
    for (int r = 0; r < n; r++) {
        size_t own = 0;
        int dep[2] = {-1, -1};
        tell[r] = -1;
        if (pipe(dep) == 0) { /* neither end leaks into the other ranks (close-on-exec) */
            fcntl(dep[0], F_SETFD, FD_CLOEXEC);
            fcntl(dep[1], F_SETFD, FD_CLOEXEC);
            fcntl(dep[1], F_SETFL, O_NONBLOCK);
            tell[r] = dep[1];
        }
        char **env = rank_env(r, n, nccl_id, ndev, dep[0], &own);
        int fds[2] = {-1, -1};
        if (!env || (prefix && pipe(fds) != 0)) {
            free_rank_env(env, own);
            if (dep[0] >= 0) close(dep[0]);
            rc = launch_error("%s", "out of memory or file descriptors", 1);
            break;
        }
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0); /* its own group: stopping a rank stops what it started too */
            if (dep[0] >= 0) fcntl(dep[0], F_SETFD, 0); /* its departures pipe survives exec */
            if (prefix) {
                dup2(fds[1], 2);
                close(fds[0]);
                close(fds[1]);
            }
            execve(exe, child_argv, env);
            fprintf(stderr, "tegraph run -n: cannot run %s: %s\n", exe, strerror(errno));
            _exit(127);
        }
        free_rank_env(env, own); /* the child has its copy */
        if (dep[0] >= 0) close(dep[0]);
        rel[r].fd = -1;
        if (prefix) {
            close(fds[1]);
            if (pid > 0) {
                rel[r].fd = fds[0];
                rel[r].plen = rel[r].len = (size_t)snprintf(rel[r].buf, sizeof rel[r].buf, "[rank %d] ", r);
            } else {
                close(fds[0]);
            }
        }
        if (pid < 0) {
            rc = launch_error("fork failed: %s", strerror(errno), 1);
            break;
        }
        setpgid(pid, pid);
        pids[r] = pid;
        alive[r] = 1;
        started++;
    }
    int running = started, failed = rc != 0, relayed = 0;
    double deadline = failed ? now_s() + GRACE_S : 0, drain_until = 0;
    if (failed)
        for (int r = 0; r < started; r++) kill(-pids[r], SIGTERM);
    for (;;) {
        /* relay stderr (waits up to 20 ms) */
        int np = 0;
        for (int r = 0; r < started; r++)
            if (rel[r].fd >= 0) pfd[np++] = (struct pollfd){.fd = rel[r].fd, .events = POLLIN};
        if (running == 0 && (np == 0 || now_s() > drain_until)) break;
        if (np > 0 && poll(pfd, (nfds_t)np, 20) > 0) {
            for (int r = 0; r < started; r++) {
                if (rel[r].fd < 0) continue;
                for (int k = 0; k < np; k++)
                    if (pfd[k].fd == rel[r].fd && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) && !relay_read(&rel[r])) {
                        relay_flush(&rel[r], 1);
                        close(rel[r].fd);
                        rel[r].fd = -1;
                    }
            }
        } else if (np == 0) {
            sleep_ms(20);
        }
        int status;
        pid_t pid;
        while (running > 0 && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
            int r = 0;
            while (r < started && pids[r] != pid) r++;
            if (r == started || !alive[r]) continue;
            alive[r] = 0;
            if (--running == 0) drain_until = now_s() + 2.0; /* what the ranks started may still hold their stderr */
            int bad = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            if (tell[r] >= 0) close(tell[r]);
            tell[r] = -1;
            if (!bad && running > 0) { /* the others may be waiting for it in a collective: tell them */
                char msg[16];
                int len = snprintf(msg, sizeof msg, "%d\n", r);
                for (int q = 0; q < started; q++)
                    if (alive[q] && tell[q] >= 0) (void)!write(tell[q], msg, (size_t)len);
            }
            if (bad && !failed && relayed && WIFSIGNALED(status) && WTERMSIG(status) == relayed) {
                /* ended by the signal passed on (a script that does not catch it): the job stops as asked */
                failed = 1;
                rc = 128 + relayed;
                deadline = now_s() + GRACE_S;
                for (int q = 0; q < started; q++)
                    if (alive[q]) kill(-pids[q], relayed);
            } else if (bad && !failed) {
                char how[96];
                describe_status(status, how, sizeof how);
                if (rel[r].fd >= 0) { /* its last words first: what is there now, without waiting on
                                          * processes the rank left behind that still hold its stderr */
                    struct pollfd now = {.fd = rel[r].fd, .events = POLLIN};
                    while (poll(&now, 1, 0) > 0 && (now.revents & POLLIN) && relay_read(&rel[r])) {}
                }
                relay_flush(&rel[r], 1);
                fprintf(stderr, "tegraph: rank %d (pid %d) %s; stopping the other %d rank(s)\n", r, (int)pid, how,
                        running);
                failed = 1;
                rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                deadline = now_s() + GRACE_S;
                for (int q = 0; q < started; q++)
                    if (alive[q]) kill(-pids[q], SIGTERM);
            }
        }
        if (got_signal) { /* pass it on: the ranks decide (a training loop saves and exits 0; a second one ends
                           * them at once), so it is no failure of its own and no deadline runs */
            int sig = got_signal;
            got_signal = 0;
            relayed = sig;
            if (signal_is_new(sig))
                for (int q = 0; q < started; q++)
                    if (alive[q]) kill(-pids[q], sig);
        }
        if (failed && running > 0 && now_s() > deadline) {
            for (int q = 0; q < started; q++)
                if (alive[q]) {
                    fprintf(stderr, "tegraph: rank %d (pid %d) did not stop within %g s; killing it\n", q,
                            (int)pids[q], GRACE_S);
                    kill(-pids[q], SIGKILL);
                }
            deadline = now_s() + 3600;
        }
    }
    for (int r = 0; r < started; r++) {
        relay_flush(&rel[r], 1);
        if (rel[r].fd >= 0) close(rel[r].fd);
    }
    for (int r = 0; r < n; r++)
        if (tell[r] >= 0) close(tell[r]);
    free(tell);
    free(pids);
    free(alive);
    free(rel);
    free(pfd);
    return rc;
}

/* Runs `mpirun -np N exe run FILE ARGS...` and returns its exit status. mpirun runs in a process group of its
 * own and the launcher relays SIGINT / SIGTERM to it as SIGUSR2, which mpirun forwards to the ranks, with the
 * signal's name written first to a small file the ranks know (TG_SIGNAL_RELAY, see main.c): they raise the
 * SIGINT / SIGTERM it names. (One relay signal: some mpirun builds do not pass SIGUSR1 on.) Given the signal
 * itself, mpirun would abort the job — SIGTERM to every rank whatever came, exit 1 even when every rank saved
 * and exited 0 — so neither a terminal's Ctrl-C nor a signal to the launcher's group reaches it directly. */
static int launch_mpirun(int n, const char *exe, char **child_argv, int nchild)
{
    const char *mpirun = getenv("TG_MPIRUN");
    if (!mpirun || !*mpirun) mpirun = "mpirun";
    char np[16];
    snprintf(np, sizeof np, "%d", n);
    char **argv = calloc((size_t)nchild + 8, sizeof *argv);
    if (!argv) return launch_error("%s", "out of memory", 1);
    int k = 0;
    argv[k++] = (char *)mpirun;
    argv[k++] = "-np";
    argv[k++] = np;
#ifdef OPEN_MPI
    argv[k++] = "--oversubscribe"; /* N local ranks, whatever the core count */
    argv[k++] = "--bind-to";       /* each rank runs OpenMP threads: no pinning to one core */
    argv[k++] = "none";
#endif
    argv[k++] = (char *)exe;
    for (int i = 1; i < nchild; i++) argv[k++] = child_argv[i];
    argv[k] = NULL;
    char relay[] = "/tmp/tegraph-signal-XXXXXX"; /* the name of the signal being relayed, for the ranks */
    int rfd = mkstemp(relay);
    if (rfd >= 0) setenv("TG_SIGNAL_RELAY", relay, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(mpirun, argv);
        fprintf(stderr, "tegraph run -n: cannot run %s (%s): set TG_MPIRUN to the mpirun program\n", mpirun,
                strerror(errno));
        _exit(1);
    }
    free(argv);
    if (pid < 0) return launch_error("fork failed: %s", strerror(errno), 1);
    setpgid(pid, pid);
    int status = 0;
    for (;;) { /* polled: a signal between a check and a blocking wait would wait for the next one */
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return launch_error("waiting for mpirun: %s", strerror(errno), 1);
        if (got_signal) {
            int sig = got_signal;
            got_signal = 0;
            if (signal_is_new(sig) && rfd >= 0) {
                const char *name = sig == SIGINT ? "INT\n" : "TERM\n";
                if (ftruncate(rfd, 0) == 0 && pwrite(rfd, name, strlen(name), 0) == (ssize_t)strlen(name))
                    kill(pid, SIGUSR2);
            } else if (signal_is_new(sig)) {
                kill(pid, SIGTERM); /* no relay file: mpirun's own stop */
            }
        }
        sleep_ms(20);
    }
    if (rfd >= 0) {
        close(rfd);
        unlink(relay);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int tg_cli_launch(int argc, char **argv)
{
    if (argc < 2) return launch_error("%s", "-n needs a number of ranks: tegraph run -n N FILE.lua [ARGS...]", 2);
    char *end;
    long n = strtol(argv[1], &end, 10);
    if (*end || n < 1 || n > 4096) return launch_error("bad number of ranks '%s' (1 to 4096)", argv[1], 2);
    if (argc < 3) return launch_error("%s", "no script: tegraph run -n N FILE.lua [ARGS...] (or -e CODE)", 2);
    if (strcmp(argv[2], "-e") == 0) { /* the ranks run `exe run -e CODE` */
        if (argc < 4) return launch_error("%s", "-e needs a chunk of Lua code", 2);
        if (argc > 4) return launch_error("-e takes one argument (unexpected '%s')", argv[4], 2);
    } else if (argv[2][0] == '-' && argv[2][1] != '\0') {
        return launch_error("unknown option '%s' (tegraph run -n N FILE.lua [ARGS...] or -e CODE)", argv[2], 2);
    }
    /* whether the launcher's stdout is a terminal: the ranks' may be a pseudo-terminal of mpirun's
     * when it is not (tg.isatty and the progress display ask this) */
    setenv("TG_STDOUT_TTY", isatty(1) ? "1" : "0", 1);
    const char *exe = self_exe(argv[0]);
    /* the ranks run `exe run FILE ARGS...` (or `exe run -e CODE`) */
    int nchild = argc - 2 + 2;
    char **child_argv = calloc((size_t)nchild + 1, sizeof *child_argv);
    if (!child_argv) return launch_error("%s", "out of memory", 1);
    child_argv[0] = (char *)exe;
    child_argv[1] = "run";
    for (int i = 2; i < argc; i++) child_argv[i] = argv[i];
    const char *how = getenv("TG_LAUNCHER"), *dev = getenv("TG_DEVICE");
    const char *opts = tg_build_options();
    int have_mpi = strstr(opts, "mpi=yes") != NULL, have_nccl = strstr(opts, "nccl=yes") != NULL;
    int gpus = have_nccl && !(dev && strcmp(dev, "cpu") == 0) && tg_device_count(TG_CUDA) > 0;
    int rc;
    if (how && strcmp(how, "fork") == 0) rc = launch_fork((int)n, exe, child_argv, gpus);
    else if (how && strcmp(how, "mpirun") == 0) rc = launch_mpirun((int)n, exe, child_argv, nchild);
    else if (how && *how) rc = launch_error("TG_LAUNCHER='%s': expected fork or mpirun", how, 2);
    else if (gpus || n == 1) rc = launch_fork((int)n, exe, child_argv, gpus);
    else if (have_mpi) rc = launch_mpirun((int)n, exe, child_argv, nchild);
    else
        rc = launch_error("%s", "CPU ranks talk through MPI, and this tegraph was built without it (install "
                                "Open MPI and reconfigure), nor are there GPUs for NCCL", 1);
    free(child_argv);
    return rc;
}
