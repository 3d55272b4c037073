/* tools/cli.h — what the `tessera` subcommands share: argument parsing with
 * clear messages, device names ("cpu:0", "vulkan:1"), and JSON strings.
 *
 * Not installed; the subcommands are tools/tessera.c (devices, gen-model,
 * dispatch) and tools/cli_run.c (run).
 */
#ifndef TESSERA_TOOLS_CLI_H
#define TESSERA_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "tessera/tessera.h"

#define CLI_MAX_DEVICES TSR_META_MAX_DEVICES
#define CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CLI_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Parse a number of a named option within [lo, hi]; false (and a message on
 * stderr) when s is not one. */
bool cli_long(const char *opt, const char *s, long lo, long hi, long *out);
bool cli_float(const char *opt, const char *s, double lo, double hi, float *out);
bool cli_u64(const char *opt, const char *s, uint64_t *out);

/* Before the first registry call: a list naming cpu:K asks for K + 1 CPU
 * devices, so TSR_CPU_DEVICES is raised to that (unless the user set it). */
void cli_prepare_cpu_devices(const char *list);
/* "cpu:0,vulkan:0" (registry:index, or a device's own name such as "cpu0")
 * into devices; false with a message naming the bad entry. */
bool cli_parse_devices(const char *list, tsr_dev **out, int max, int *n);
/* The default mix: every GPU when there is one, else every CPU device. */
int cli_default_devices(tsr_dev **out, int max);
/* Connects to tessera RPC servers (a comma-separated list of host:port,
 * tcp://, ipc:// or tls+tcp:// endpoints); their devices join the "rpc"
 * registry as rpc:0, rpc:1, ... Token and TLS settings come from the
 * environment (TSR_RPC_TOKEN_FILE, TSR_RPC_TLS_CA; see tessera/rpc.h). Call it
 * after cli_prepare_cpu_devices. False with a message naming the endpoint,
 * or saying that this build has no RPC. */
bool cli_add_rpc(const char *cmd, const char *list);
/* "registry:index" of a device. */
const char *cli_dev_name(tsr_dev *dev, char *buf, size_t size);

/* Comma-separated floats or integers: false with a message on a bad one. */
bool cli_floats(const char *opt, const char *s, float *out, int max, int *n);
bool cli_ints(const char *opt, const char *s, int32_t *out, int max, int *n);

/* s as a JSON string literal, quotes included. */
void cli_json_str(FILE *f, const char *s);

/* Formats bytes as "12.3 MiB"; returns buf. */
const char *cli_bytes(double bytes, char *buf, size_t size);

#endif /* TESSERA_TOOLS_CLI_H */
