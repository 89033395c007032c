/* signals.c — opt-in SIGINT / SIGTERM catching for training loops: the first signal sets a flag, a second ends the process. */
#include "core/core.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t pending;
static int caught;
static struct sigaction old_int, old_term;

static void on_signal(int sig)
{
    if (pending) { /* the second one: the previous disposition, at once */
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        raise(sig);
        return;
    }
    pending = sig;
}

tg_status tg_signals_catch(int on)
{
    if (on && !caught) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART;
        if (sigaction(SIGINT, &sa, &old_int) != 0 || sigaction(SIGTERM, &sa, &old_term) != 0)
            return tg_error(TG_EINVAL, "signals_catch: sigaction failed: %s", strerror(errno));
        caught = 1;
    } else if (!on && caught) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        caught = 0;
    }
    pending = 0;
    return TG_OK;
}

int tg_signals_pending(void) { return (int)pending; }
