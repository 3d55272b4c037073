/* backends/rpc/rpc_auth.c — nonces, HMAC-SHA256 proofs and token files of
 * the RPC handshake (see rpc_auth.h for the scheme).
 *
 * Not TLS (NNG does that) nor the handshake's messages. The HMAC is
 * mbedTLS's; nothing cryptographic is written here.
 */
#include "backends/rpc/rpc_auth.h"

#include <errno.h>
#include <mbedtls/md.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/internal.h"

tsr_status tsr__rpc_random(uint8_t *out, size_t n)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t got = getrandom(out + done, n - done, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return tsr__error(TSR_EIO, "rpc: no random bytes for a nonce (getrandom errno %d)",
                              errno);
        }
        done += (size_t)got;
    }
    return TSR_OK;
}

tsr_status tsr__rpc_token_read(const char *path, rpc_token *out)
{
    out->len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tsr__error(TSR_EIO, "rpc: cannot open token file '%s' (errno %d)", path, errno);
    size_t n = fread(out->bytes, 1, sizeof(out->bytes), f);
    const bool more = fgetc(f) != EOF;
    const bool err = ferror(f);
    fclose(f);
    if (err)
        return tsr__error(TSR_EIO, "rpc: cannot read token file '%s'", path);
    if (more)
        return tsr__error(TSR_ERANGE, "rpc: token file '%s' is longer than %d bytes", path,
                          RPC_TOKEN_MAX);
    if (n > 0 && out->bytes[n - 1] == '\n')
        n--;
    if (n > 0 && out->bytes[n - 1] == '\r')
        n--;
    if (n == 0)
        return tsr__error(TSR_EINVAL, "rpc: token file '%s' is empty", path);
    out->len = n;
    return TSR_OK;
}

tsr_status tsr__rpc_auth_mac(const rpc_token *token, bool server_side,
                             const uint8_t client_nonce[RPC_NONCE_SIZE],
                             const uint8_t server_nonce[RPC_NONCE_SIZE], uint8_t mac[RPC_MAC_SIZE])
{
    static const char client_label[] = "tessera-rpc v1 client";
    static const char server_label[] = "tessera-rpc v1 server";
    const char *label = server_side ? server_label : client_label;
    const size_t ll = strlen(label);
    uint8_t msg[sizeof(client_label) + 2 * RPC_NONCE_SIZE];
    memcpy(msg, label, ll);
    memcpy(msg + ll, server_side ? client_nonce : server_nonce, RPC_NONCE_SIZE);
    memcpy(msg + ll + RPC_NONCE_SIZE, server_side ? server_nonce : client_nonce, RPC_NONCE_SIZE);
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    if (!md ||
        mbedtls_md_hmac(md, token->bytes, token->len, msg, ll + 2 * RPC_NONCE_SIZE, mac) != 0)
        return tsr__error(TSR_EINTERNAL, "rpc: HMAC-SHA256 failed (mbedTLS)");
    return TSR_OK;
}

bool tsr__rpc_mac_equal(const uint8_t a[RPC_MAC_SIZE], const uint8_t b[RPC_MAC_SIZE])
{
    volatile uint8_t diff = 0;
    for (int i = 0; i < RPC_MAC_SIZE; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
