/* tests/fuzz/gguf_seeds.c — writes a seed corpus of small valid GGUF files
 * for fuzz_gguf: every value type, every tensor type, alignments 1, 32 and
 * 256, an empty file, version 2, and nested arrays (encoded by hand: the
 * writer does not write them). Usage: gguf_seeds DIR
 */
#include <stdio.h>
#include <string.h>

#include "tessera/gguf.h"

static int check(tsr_status st, const char *what)
{
    if (st != TSR_OK)
        fprintf(stderr, "gguf_seeds: %s: %s\n", what, tsr_last_error());
    return st != TSR_OK;
}

static int write_one(const char *dir, const char *name, int variant)
{
    static const float f[64] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const int32_t i32[] = {-1, 2, -3};
    static const bool b[] = {true, false};
    static const char *const s[] = {"a", "", "bcd"};
    tsr_gguf_writer *w;
    if (check(tsr_gguf_writer_new(&w), "new"))
        return 1;
    int bad = 0;
    if (variant >= 1) {
        bad |= check(tsr_gguf_writer_set_str(w, "general.architecture", "seed"), "set");
        bad |= check(tsr_gguf_writer_set_u8(w, "s.u8", 7), "set");
        bad |= check(tsr_gguf_writer_set_i8(w, "s.i8", -7), "set");
        bad |= check(tsr_gguf_writer_set_u16(w, "s.u16", 700), "set");
        bad |= check(tsr_gguf_writer_set_i16(w, "s.i16", -700), "set");
        bad |= check(tsr_gguf_writer_set_u32(w, "s.u32", 70000), "set");
        bad |= check(tsr_gguf_writer_set_i32(w, "s.i32", -70000), "set");
        bad |= check(tsr_gguf_writer_set_u64(w, "s.u64", 1ull << 40), "set");
        bad |= check(tsr_gguf_writer_set_i64(w, "s.i64", -(1ll << 40)), "set");
        bad |= check(tsr_gguf_writer_set_f32(w, "s.f32", 0.5f), "set");
        bad |= check(tsr_gguf_writer_set_f64(w, "s.f64", -0.25), "set");
        bad |= check(tsr_gguf_writer_set_bool(w, "s.bool", true), "set");
        bad |= check(tsr_gguf_writer_set_array(w, "a.i32", TSR_GGUF_TYPE_INT32, i32, 3), "set");
        bad |= check(tsr_gguf_writer_set_array(w, "a.f32", TSR_GGUF_TYPE_FLOAT32, f, 4), "set");
        bad |= check(tsr_gguf_writer_set_array(w, "a.bool", TSR_GGUF_TYPE_BOOL, b, 2), "set");
        bad |= check(tsr_gguf_writer_set_str_array(w, "a.str", s, 3), "set");
    }
    if (variant >= 2) {
        const uint32_t align[] = {32, 1, 256};
        bad |= check(tsr_gguf_writer_set_alignment(w, align[variant % 3]), "alignment");
        bad |=
            check(tsr_gguf_writer_add_tensor(w, "f32", TSR_TYPE_F32, 2, (const int64_t[]){3, 2}, f),
                  "add");
        bad |= check(tsr_gguf_writer_add_tensor(w, "f16", TSR_TYPE_F16, 1, (const int64_t[]){5}, f),
                     "add");
        bad |= check(
            tsr_gguf_writer_add_tensor(w, "bf16", TSR_TYPE_BF16, 3, (const int64_t[]){2, 1, 2}, f),
            "add");
        bad |=
            check(tsr_gguf_writer_add_tensor(w, "q8_0", TSR_TYPE_Q8_0, 1, (const int64_t[]){32}, f),
                  "add");
        bad |= check(tsr_gguf_writer_add_tensor(w, "blk.0.i32", TSR_TYPE_I32, 4,
                                                (const int64_t[]){1, 2, 1, 3}, f),
                     "add");
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    bad |= check(tsr_gguf_writer_write(w, path), path);
    tsr_gguf_writer_free(w);
    return bad;
}

/* Little-endian helpers for the hand-encoded seeds. */
static void put(FILE *f, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        fputc((int)(v >> (8 * i)) & 0xff, f);
}

static void put_str(FILE *f, const char *s)
{
    put(f, strlen(s), 8);
    fputs(s, f);
}

static int write_hand(const char *dir, const char *name, uint32_t version)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    fputs("GGUF", f);
    put(f, version, 4);
    put(f, 1, 8);         /* tensors */
    put(f, 2, 8);         /* keys */
    put_str(f, "nested"); /* [[1, 2], [], [["x"]]] */
    put(f, 9, 4), put(f, 9, 4), put(f, 3, 8);
    put(f, 2, 4), put(f, 2, 8), put(f, 1, 2), put(f, 2, 2);
    put(f, 0, 4), put(f, 0, 8);
    put(f, 9, 4), put(f, 1, 8), put(f, 8, 4), put(f, 1, 8), put_str(f, "x");
    put_str(f, "s"), put(f, 8, 4), put_str(f, "v");
    put_str(f, "t"), put(f, 1, 4), put(f, 4, 8), put(f, 0, 4), put(f, 0, 8);
    while (ftell(f) % 32)
        fputc(0, f);
    put(f, 0x3f800000, 4), put(f, 0x40000000, 4), put(f, 0x40400000, 4), put(f, 0x40800000, 4);
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int bad = write_one(argv[1], "empty.gguf", 0);
    bad |= write_one(argv[1], "keys.gguf", 1);
    bad |= write_one(argv[1], "align256.gguf", 2);
    bad |= write_one(argv[1], "tensors.gguf", 3);
    bad |= write_one(argv[1], "align1.gguf", 4);
    bad |= write_hand(argv[1], "nested_v3.gguf", 3);
    bad |= write_hand(argv[1], "nested_v2.gguf", 2);
    return bad;
}
