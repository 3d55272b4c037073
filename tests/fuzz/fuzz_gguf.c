/* tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader: any input
 * must either open (and then every accessor works on every key, array
 * element and tensor byte, within bounds) or be refused with a "gguf: "
 * message; never crash, leak or read out of bounds.
 *
 * Built with -DTSR_FUZZ=ON by clang only; it compiles the reader's sources
 * itself so that coverage counts the parser and nothing else. How to run it:
 * README.md, "GGUF files".
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_walk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tsr_gguf *g = NULL;
    if (tsr_gguf_open_memory(data, size, &g) != TSR_OK) {
        if (g || strncmp(tsr_last_error(), "gguf: ", 6) != 0)
            abort();
        return 0;
    }
    const char *bad;
    gguf_walk(g, &bad);
    if (bad)
        abort();
    tsr_gguf_close(g);
    return 0;
}
