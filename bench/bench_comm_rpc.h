/* bench/bench_comm_rpc.h — bench_comm's rows over remote devices
 * (bench_comm_rpc.c), built when tessera has RPC (TSR_BENCH_RPC). */
#ifndef TESSERA_BENCH_COMM_RPC_H
#define TESSERA_BENCH_COMM_RPC_H

#include <stdbool.h>
#include <stdio.h>

/* Forks the raw NNG peers: call it first in main, before NNG is used. */
void bench_comm_rpc_prepare(void);
/* Starts four servers, runs the remote rows into md / jsonl and stdout, and
 * counts the target's verdicts. */
void bench_comm_rpc_run(FILE *md, FILE *jsonl, bool quick, int *met, int *missed);

#endif /* TESSERA_BENCH_COMM_RPC_H */
