/* tools/tessera.c — the `tessera` command: subcommand dispatch, `devices`
 * and `gen-model` (`run` is tools/cli_run.c).
 *
 * Exit status: 0 success, 1 failure (the message names what failed), 2 a
 * usage error. Every subcommand has --help.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/model.h"
#include "tools/cli.h"

int cli_run(int argc, char **argv);

static void usage(FILE *f)
{
    fprintf(f, "usage: tessera COMMAND [options]\n"
               "\n"
               "Runs one model over many devices as if they were one.\n"
               "\n"
               "commands:\n"
               "  devices     list the devices, with the names --devices takes\n"
               "  run         run a model (a GGUF file or a generated preset) and report speed\n"
               "  gen-model   write a GGUF file with random weights of a preset's shape\n"
               "\n"
               "`tessera COMMAND --help` describes each. Environment: TSR_CPU_DEVICES=N splits\n"
               "the host's cores into N CPU devices (naming cpu:K in --devices does it too).\n");
}

/* ---- devices ------------------------------------------------------------------------- */

static void devices_usage(FILE *f)
{
    fprintf(f, "usage: tessera devices [--json] [--rpc ENDPOINT[,...]]...\n"
               "\n"
               "Lists every device: the name --devices takes (cpu:0, vulkan:0, ...), its type,\n"
               "free and total memory, capabilities and description.\n"
               "\n"
               "  --json           one JSON array\n"
               "  --rpc ENDPOINT   also list the devices of tessera RPC servers (host:port,\n"
               "                   tcp://, ipc://, tls+tcp://; comma-separated; they are rpc:N)\n");
}

static int cmd_devices(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, 0, 'j'},
                                             {"rpc", required_argument, 0, 'r'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'r':
            if (!cli_add_rpc("devices", optarg))
                return 1;
            break;
        case 'h':
            devices_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "tessera devices: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tessera devices: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!json)
        printf("%-12s %-6s %-22s %-22s %s\n", "NAME", "TYPE", "MEMORY free/total", "CAPS",
               "DESCRIPTION");
    else
        printf("[");
    for (size_t i = 0; i < tsr_dev_count(); i++) {
        tsr_dev *d = tsr_dev_get(i);
        char name[32], fb[32], tb[32], mem[48], caps[48];
        size_t free_b = 0, total_b = 0;
        tsr_dev_memory(d, &free_b, &total_b);
        const tsr_dev_caps cp = tsr_dev_get_caps(d);
        snprintf(mem, sizeof(mem), "%s / %s", cli_bytes((double)free_b, fb, sizeof(fb)),
                 cli_bytes((double)total_b, tb, sizeof(tb)));
        snprintf(caps, sizeof(caps), "%s%s%s", cp.async ? "async " : "", cp.events ? "events " : "",
                 cp.host_buffer ? "host-buffer" : "");
        cli_dev_name(d, name, sizeof(name));
        if (json) {
            printf("%s\n  {\"name\": \"%s\", \"type\": \"%s\", \"memory_free\": %zu, "
                   "\"memory_total\": %zu, "
                   "\"async\": %s, \"events\": %s, \"host_buffer\": %s, \"description\": ",
                   i ? "," : "", name, tsr_dev_type_name(tsr_dev_get_type(d)), free_b, total_b,
                   cp.async ? "true" : "false", cp.events ? "true" : "false",
                   cp.host_buffer ? "true" : "false");
            cli_json_str(stdout, tsr_dev_description(d));
            printf("}");
        } else {
            printf("%-12s %-6s %-22s %-22s %s\n", name, tsr_dev_type_name(tsr_dev_get_type(d)), mem,
                   caps, tsr_dev_description(d));
        }
    }
    if (json)
        printf("\n]\n");
    return 0;
}

/* ---- gen-model ------------------------------------------------------------------------ */

static void gen_usage(FILE *f)
{
    fprintf(f, "usage: tessera gen-model --preset NAME --out FILE [--seed S] [--wtype TYPE]\n"
               "\n"
               "Writes a GGUF file (llama architecture) with seeded random weights of a preset's\n"
               "shape; the same seed gives the same file. The weights are generated on cpu:0.\n"
               "\n"
               "  --preset NAME   the shape (below)\n"
               "  --out FILE      the file to write (replaced only once complete)\n"
               "  --seed S        seed (default 1)\n"
               "  --wtype TYPE    f32, f16, bf16 or q8_0 (default: the preset's)\n"
               "\npresets:\n");
    for (const char *const *p = tsr_model_preset_names(); *p; p++)
        fprintf(f, "  %-14s %s\n", *p, tsr_model_preset_describe(*p));
}

static int cmd_gen_model(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"preset", required_argument, 0, 'p'}, {"out", required_argument, 0, 'o'},
        {"seed", required_argument, 0, 's'},   {"wtype", required_argument, 0, 'w'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *preset = NULL, *out = NULL, *wtype = NULL;
    uint64_t seed = 1;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            preset = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'w':
            wtype = optarg;
            break;
        case 's':
            if (!cli_u64("--seed", optarg, &seed))
                return 2;
            break;
        case 'h':
            gen_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "tessera gen-model: unknown or incomplete option '%s' (see --help)\n",
                    argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc || !preset || !out) {
        fprintf(stderr,
                optind < argc ? "tessera gen-model: unexpected argument '%s'\n"
                              : "tessera gen-model: --preset and --out are required%s\n",
                optind < argc ? argv[optind] : "");
        return 2;
    }
    tsr_model_hparams hp;
    if (tsr_model_preset(preset, &hp) != TSR_OK) {
        fprintf(stderr, "tessera gen-model: %s\n", tsr_last_error());
        return 2;
    }
    if (wtype) {
        const tsr_type all[] = {TSR_TYPE_F32, TSR_TYPE_F16, TSR_TYPE_BF16, TSR_TYPE_Q8_0};
        bool found = false;
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            if (strcmp(wtype, tsr_type_name(all[i])) == 0)
                hp.wtype = all[i], found = true;
        if (!found) {
            fprintf(stderr, "tessera gen-model: --wtype: '%s' is not one of f32, f16, bf16, q8_0\n",
                    wtype);
            return 2;
        }
    }
    tsr_model_config cfg;
    tsr_model_config_default(&cfg);
    cfg.n_ctx = 1;
    cfg.quiet = true;
    tsr_model *m = NULL;
    tsr_status st = tsr_model_generate(&hp, seed, &cfg, &m);
    if (st == TSR_OK)
        st = tsr_model_save(m, out);
    tsr_model_free(m);
    if (st != TSR_OK) {
        fprintf(stderr, "tessera gen-model: %s\n", tsr_last_error());
        return 1;
    }
    printf("wrote %s (preset %s, %s, seed %llu)\n", out, preset, tsr_type_name(hp.wtype),
           (unsigned long long)seed);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "devices") == 0)
        return cmd_devices(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "gen-model") == 0)
        return cmd_gen_model(argc - 1, argv + 1);
    fprintf(stderr, "tessera: unknown command '%s' (devices, run, gen-model; see tessera --help)\n",
            cmd);
    return 2;
}
