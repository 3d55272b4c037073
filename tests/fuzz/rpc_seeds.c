/* tests/fuzz/rpc_seeds.c — writes the seed corpus of fuzz_rpc into a
 * directory: valid sessions (with and without the handshake) that create
 * buffers, a stream and an event, then exercise every command, in several
 * variants (rpc_testutil.c builds the frames). Usage: rpc_seeds DIR
 */
#include <stdio.h>
#include <stdlib.h>

#include "rpc_testutil.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: rpc_seeds DIR\n");
        return 2;
    }
    int n = 0;
    for (int hello = 0; hello < 2; hello++)
        for (int v = 0; v < 8; v++) {
            rpc_wr w = {0};
            const uint8_t mode = (uint8_t)((hello ? 0 : 1) | (v % 4) << 3);
            rpc_wr_bytes(&w, &mode, 1);
            rt_setup_frames(&w, hello != 0);
            rt_exercise_frames(&w, v);
            char path[512];
            snprintf(path, sizeof(path), "%s/seed-%s-%d", argv[1], hello ? "hello" : "direct", v);
            FILE *f = fopen(path, "wb");
            if (!f || w.bad || fwrite(w.p, 1, w.len, f) != w.len) {
                fprintf(stderr, "rpc_seeds: cannot write %s\n", path);
                return 1;
            }
            fclose(f);
            free(w.p);
            n++;
        }
    printf("rpc_seeds: %d seeds in %s\n", n, argv[1]);
    return 0;
}
