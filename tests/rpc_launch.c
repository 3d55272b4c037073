/* tests/rpc_launch.c — runs a test program against remote devices: starts a
 * tessera-rpc-server on a free loopback port, runs the command with
 * TSR_RPC_SERVERS pointing at it (so the program's "rpc" registry lists the
 * server's devices beside the local ones), then stops the server.
 *
 *   rpc_launch [--server-arg ARG]... -- COMMAND [ARGS...]
 *
 * The exit status is the command's; 1 when the server does not start, or
 * does not stop cleanly (a crash, or a leak report under LeakSanitizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rpc_testutil.h"

int main(int argc, char **argv)
{
    const char *sargs[32];
    int ns = 0, i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--server-arg") == 0 && i + 1 < argc && ns < 31)
            sargs[ns++] = argv[++i];
        else {
            fprintf(stderr, "rpc_launch: unexpected '%s'\n", argv[i]);
            return 2;
        }
    }
    sargs[ns] = NULL;
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: rpc_launch [--server-arg ARG]... -- COMMAND [ARGS...]\n");
        return 2;
    }
    rt_server srv;
    if (!rt_server_start(&srv, NULL, sargs))
        return 1;
    fprintf(stderr, "rpc_launch: server %s (pid %d)\n", srv.url, (int)srv.pid);
    setenv("TSR_RPC_SERVERS", srv.url, 1);
    const pid_t pid = fork();
    if (pid == 0) {
        execv(argv[i + 1], argv + i + 1);
        perror("rpc_launch: exec");
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    const int src = rt_server_stop(&srv);
    if (src != 0) {
        fprintf(stderr, "rpc_launch: the server did not stop cleanly (status %d)\n", src);
        return rc ? rc : 1;
    }
    return rc;
}
