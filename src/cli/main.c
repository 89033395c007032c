/* main.c — the `tegraph` command: runs Lua scripts in a tegraph runtime, prints build and device info. */
#include "config.h"
#include "tegraph.h"
#include "cli/launch.h"
#include <lua.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Exit statuses: success, script error, usage error. */
enum { EXIT_OK = 0, EXIT_SCRIPT = 1, EXIT_USAGE = 2 };

static void usage(FILE *f)
{
    fputs("usage: tegraph [--device DEV] COMMAND [ARGS...]\n"
          "\n"
          "commands:\n"
          "  run FILE.lua [ARGS...]   run a Lua script (arg[0] = FILE.lua, arg[1..] = ARGS)\n"
          "  run -n N FILE.lua ...    run it as N local ranks (GPUs: one each, NCCL; CPU: via mpirun)\n"
          "  run [-n N] -e CODE       run a chunk of Lua code (on N ranks)\n"
          "  run --help               the options of run\n"
          "  FILE.lua [ARGS...]       the same as run FILE.lua\n"
          "  -e CODE                  the same as run -e CODE\n"
          "  schedule NAME -p P -m M [--svg FILE]\n"
          "                           print a pipeline schedule (gpipe, 1f1b, interleaved, zb_h1, zb_v, all)\n"
          "                           and its simulated bubble fraction\n"
          "  info                     version, build options, backends and devices\n"
          "  --help                   this message\n"
          "  --version                the version\n"
          "\n"
          "options:\n"
          "  --device DEV             cpu, cuda or cuda:N: the default device (sets TG_DEVICE)\n"
          "\n"
          "exit status: 0 success, 1 script error, 2 usage error\n",
          f);
}

static void run_usage(FILE *f)
{
    fputs("usage: tegraph run [-n N] FILE.lua [ARGS...]\n"
          "       tegraph run [-n N] -e CODE\n"
          "\n"
          "  FILE.lua [ARGS...]  run a Lua script: arg[0] = FILE.lua, arg[1..] = ARGS (also the script's ...)\n"
          "  -e CODE             run a chunk of Lua code instead\n"
          "  -n N                run it as N local ranks: on GPUs one each, forked here and joined by NCCL;\n"
          "                      on CPUs through mpirun (TG_MPIRUN names it). TG_LAUNCHER=fork|mpirun\n"
          "                      forces a way; stderr lines get \"[rank R] \" (TG_RANK_PREFIX=0: not)\n"
          "  --device DEV        first: cpu, cuda or cuda:N, the default device (as tegraph --device DEV run)\n"
          "  -h, --help          this message\n"
          "\n"
          "exit status: 0 success, 1 script error, 2 usage error; with -n N the status of the first rank that\n"
          "fails, except through mpirun (CPUs) for a rank that exits while others still wait for it in a\n"
          "collective: they fail, and the job exits 1\n",
          f);
}

static int usage_error(const char *fmt, const char *what)
{
    fputs("tegraph: ", stderr);
    fprintf(stderr, fmt, what);
    fputs("\n\n", stderr);
    usage(stderr);
    return EXIT_USAGE;
}

static void human_bytes(size_t b, char *buf, size_t n)
{
    if (b >= (size_t)1 << 30)
        snprintf(buf, n, "%.1f GiB", (double)b / (double)((size_t)1 << 30));
    else
        snprintf(buf, n, "%.1f MiB", (double)b / (double)((size_t)1 << 20));
}

static int cmd_info(void)
{
    char dev[32], name[256], mem[32];
    const char *opts = tg_build_options();
    printf("tegraph %s\n", tg_version());
    printf("build options: %s\n", opts);
    printf("backends: cpu%s\n", strstr(opts, "cuda=yes") ? " cuda" : "");
    printf("devices:\n");
    for (int ty = TG_CPU; ty <= TG_CUDA; ty++) {
        int n = tg_device_count((tg_device_type)ty);
        for (int i = 0; i < n; i++) {
            tg_device d = {(tg_device_type)ty, i};
            size_t total = 0;
            tg_device_str(d, dev, sizeof dev);
            if (tg_device_describe(d, name, sizeof name, &total) == TG_OK) {
                human_bytes(total, mem, sizeof mem);
                printf("  %-8s %s, %s\n", dev, name, mem);
            } else {
                printf("  %-8s (%s)\n", dev, tg_last_error());
            }
        }
    }
    if (tg_device_count(TG_CUDA) == 0) printf("  (no CUDA device)\n");
    printf("default device: %s\n", tg_device_str(tg_default_device(), dev, sizeof dev));
    return EXIT_OK;
}

/* Runs a file or a chunk in a fresh runtime; prints the error (FILE:LINE:
 * message, then the traceback) on failure. */
static int run(const char *path, const char *code, int argc, char **argv)
{
    tg_cli_rank_begin(); /* launch.c: in a rank of a multi-rank job, prefix stderr with the rank */
    tg_runtime *rt = tg_runtime_new();
    if (rt == NULL) {
        fprintf(stderr, "tegraph: %s\n", tg_last_error());
        return EXIT_SCRIPT;
    }
    tg_status st = tg_runtime_allow_exit(rt); /* the program is the host: its scripts may end it */
    if (st == TG_OK && code) { /* arg as lua -e has it: a table, arg[0] the program */
        lua_State *L = tg_runtime_lua(rt);
        lua_createtable(L, 0, 1);
        lua_pushstring(L, "tegraph");
        lua_rawseti(L, -2, 0);
        lua_setglobal(L, "arg");
    }
    if (st == TG_OK)
        st = code ? tg_runtime_dostring(rt, code, "=(command line)") : tg_runtime_dofile(rt, path, argc, argv);
    if (st != TG_OK) {
        fflush(stdout);
        fprintf(stderr, "%s\n", tg_runtime_error(rt));
    }
    if (st == TG_OK && tg_world_drain() != TG_OK) { /* a collective failed after the script moved on */
        fprintf(stderr, "tegraph: %s\n", tg_last_error());
        st = TG_EDEVICE;
    }
    fflush(stdout);
    tg_cli_rank_end(st != TG_OK); /* launch.c: a failed rank stops the whole job (before anything can wait on it) */
    tg_runtime_free(rt);
    return st == TG_OK ? EXIT_OK : EXIT_SCRIPT;
}

/* `--device DEV` or `--device=DEV` at argv[i]: checks DEV and sets TG_DEVICE. Returns how many arguments it
 * took (1 or 2), or -1 after printing a usage error. */
static int device_option(int argc, char **argv, int i)
{
    const char *d = NULL;
    int k = 1;
    if (argv[i][8] == '=') {
        d = argv[i] + 9;
    } else if (argv[i][8] == '\0') {
        if (i + 1 >= argc) {
            usage_error("%s needs a value (cpu, cuda or cuda:N)", argv[i]);
            return -1;
        }
        d = argv[i + 1];
        k = 2;
    } else {
        usage_error("unknown option '%s'", argv[i]);
        return -1;
    }
    tg_device dev;
    if (tg_device_parse(d, &dev) != TG_OK) {
        usage_error("bad --device: %s", tg_last_error());
        return -1;
    }
    setenv("TG_DEVICE", d, 1);
    return k;
}

/* `tegraph run --device DEV ...` as `tegraph --device DEV run ...`: takes the --device options right after
 * "run" (argv[0]) off the front of *argv. Returns -1 after a usage error. */
static int run_device_options(int *argc, char ***argv)
{
    while (*argc > 1 && strncmp((*argv)[1], "--device", 8) == 0) {
        int k = device_option(*argc, *argv, 1);
        if (k < 0) return -1;
        *argc -= k;
        *argv += k;
    }
    return 0;
}

/* `tegraph -e CODE`, `tegraph run -e CODE`: one argument, the chunk. */
static int run_code(int argc, char **argv)
{
    if (argc < 2) return usage_error("%s", "-e needs a chunk of Lua code");
    if (argc > 2) return usage_error("-e takes one argument (unexpected '%s')", argv[2]);
    return run(NULL, argv[1], 0, NULL);
}

/* `tegraph run ...`, argv[0] = "run". */
static int cmd_run(int argc, char **argv)
{
    if (run_device_options(&argc, &argv) < 0) return EXIT_USAGE;
    if (argc < 2) return usage_error("%s", "run needs a script: tegraph run FILE.lua [ARGS...] (or -e CODE)");
    const char *a = argv[1];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
        run_usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(a, "-n") == 0 && argc > 3 && (strcmp(argv[3], "--help") == 0 || strcmp(argv[3], "-h") == 0)) {
        run_usage(stdout); /* run -n N --help */
        return EXIT_OK;
    }
    if (strcmp(a, "-n") == 0) return tg_cli_launch(argc - 1, argv + 1); /* launch.c: N ranks */
    if (strcmp(a, "-e") == 0) return run_code(argc - 1, argv + 1);
    if (a[0] == '-' && a[1] != '\0') {
        fprintf(stderr, "tegraph run: unknown option '%s'\n\n", a);
        run_usage(stderr);
        return EXIT_USAGE;
    }
    return run(a, NULL, argc - 2, argv + 2);
}

/* `tegraph schedule NAME --stages P --microbatches M [--svg FILE]`: the schedule
 * library's cli(...), called with the arguments after "schedule", prints the
 * table and the simulated bubble; its return value is the exit status. */
static int cmd_schedule(int argc, char **argv)
{
    tg_runtime *rt = tg_runtime_new();
    if (rt == NULL) {
        fprintf(stderr, "tegraph: %s\n", tg_last_error());
        return EXIT_SCRIPT;
    }
    int status = EXIT_SCRIPT;
    tg_runtime_allow_exit(rt);
    if (tg_runtime_call(rt, "tegraph.schedule", "cli", argc, argv, &status) != TG_OK) {
        fflush(stdout);
        fprintf(stderr, "%s\n", tg_runtime_error(rt));
        status = EXIT_SCRIPT;
    }
    tg_runtime_free(rt);
    fflush(stdout);
    return status;
}

/* OpenMP's default busy-waiting makes the CPU backend's threads fight each
 * other (and any other load) between the many small parallel regions of a
 * training step: measured 3x slower on 2 cores. libgomp reads the policy when
 * it loads, before main, so the CLI re-executes itself once with a passive
 * policy unless the user chose one. */
static void prefer_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("TG_NO_REEXEC")) return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("TG_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: then go on as we are */
}

/* A rank of `tegraph run -n N` under mpirun gets the launcher's SIGINT / SIGTERM as SIGUSR2 (mpirun forwards it;
 * it would abort the job on the signals themselves), the signal's name in the file TG_SIGNAL_RELAY names: it is
 * raised here as that signal, so a script that catches signals (tg.signals.catch) sees SIGINT or SIGTERM and one
 * that does not ends by it. Only for processes the launcher started: the variable is not passed further down. */
static char relay_path[256]; /* the launcher's file naming the relayed signal */

static void on_relayed(int sig)
{
    (void)sig;
    char c = 'T';
    int fd = open(relay_path, O_RDONLY); /* open, read, close: async-signal-safe */
    if (fd >= 0) {
        if (read(fd, &c, 1) != 1) c = 'T';
        close(fd);
    }
    raise(c == 'I' ? SIGINT : SIGTERM);
}

static void take_relayed_signals(void)
{
    const char *v = getenv("TG_SIGNAL_RELAY");
    if (!v || v[0] != '/' || strlen(v) >= sizeof relay_path) return;
    memcpy(relay_path, v, strlen(v) + 1);
    unsetenv("TG_SIGNAL_RELAY");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_relayed;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
}

int main(int argc, char **argv)
{
    prefer_passive_openmp(argv);
    take_relayed_signals();
    int i = 1;
    while (i < argc && strncmp(argv[i], "--device", 8) == 0) {
        int k = device_option(argc, argv, i);
        if (k < 0) return EXIT_USAGE;
        i += k;
    }
    const char *denv = getenv("TG_DEVICE");
    tg_device denv_dev;
    if (denv && *denv && tg_device_parse(denv, &denv_dev) != TG_OK) return usage_error("bad TG_DEVICE: %s", tg_last_error());
    if (tg_env_check() != TG_OK) return usage_error("%s", tg_last_error());
    if (i >= argc) return usage_error("%s", "no command given");
    const char *cmd = argv[i];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-v") == 0) {
        if (i + 1 < argc) return usage_error("--version takes no arguments (got '%s')", argv[i + 1]);
        printf("tegraph %s\n", tg_version());
        return EXIT_OK;
    }
    if (strcmp(cmd, "info") == 0) {
        if (i + 1 < argc) return usage_error("info takes no arguments (got '%s')", argv[i + 1]);
        return cmd_info();
    }
    if (strcmp(cmd, "-e") == 0) return run_code(argc - i, argv + i);
    if (strcmp(cmd, "schedule") == 0) return cmd_schedule(argc - i - 1, argv + i + 1);
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - i, argv + i);
    size_t n = strlen(cmd);
    if (n > 4 && strcmp(cmd + n - 4, ".lua") == 0) return run(cmd, NULL, argc - i - 1, argv + i + 1);
    return usage_error("unknown command '%s'", cmd);
}
