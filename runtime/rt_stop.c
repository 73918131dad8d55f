/* rt_stop.c: a graceful stop on SIGINT, SIGTERM and SIGUSR1.
 *
 * The handler only records the signal; the epoch loop looks at it where a
 * range of steps ends (rt_loop.c), agrees with the other ranks, writes a
 * checkpoint at that step and returns. A second signal while the first is
 * pending means "now": the default action (the process dies of it).
 * Slurm's --signal=USR1@60 sends SIGUSR1 a minute before the time limit;
 * mpirun forwards SIGTERM (and SIGUSR1) to its ranks. */
#include "rt_internal.h"
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t pending;
static const int watched[] = {SIGINT, SIGTERM, SIGUSR1};
static struct sigaction saved[3];
static int installed;

static void on_signal(int sig)
{
    if (pending) {                  /* the second one: stop at once */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    pending = sig;
}

void rt_stop_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;       /* reads, writes and waits go on */
    for (int i = 0; i < 3; i++)
        sigaction(watched[i], &sa, &saved[i]);
    installed = 1;
}

void rt_stop_uninstall(void)
{
    for (int i = 0; installed && i < 3; i++)
        sigaction(watched[i], &saved[i], NULL);
    installed = 0;
}

int rt_stop_pending(void) { return pending; }

void rt_stop_request(int sig) { pending = sig; }

const char *rt_stop_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

/* the shell's convention, 128 + the signal: 130, 143, 138 (Linux) */
int rt_stop_status(int sig) { return 128 + sig; }
