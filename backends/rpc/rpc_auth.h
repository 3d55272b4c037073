/* backends/rpc/rpc_auth.h — the shared-secret challenge/response of the RPC
 * handshake: nonces, HMAC-SHA256 proofs (mbedTLS), constant-time checks and
 * reading the token. Not installed.
 *
 * After HELLO both sides hold a client nonce and a server nonce (32 random
 * bytes each). The client proves it knows the token with
 *   HMAC-SHA256(token, "tessera-rpc v1 client" || server_nonce || client_nonce)
 * and the server answers with the same over "tessera-rpc v1 server" ||
 * client_nonce || server_nonce, so the client knows it reached a server that
 * holds the token too. The token never crosses the wire; a recorded proof
 * is useless against fresh nonces.
 */
#ifndef TESSERA_RPC_AUTH_H
#define TESSERA_RPC_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/rpc/rpc_proto.h"

#define RPC_TOKEN_MAX 4096

typedef struct rpc_token {
    uint8_t bytes[RPC_TOKEN_MAX];
    size_t len; /* 0: no token */
} rpc_token;

/* Fills out with cryptographically random bytes (getrandom). */
tsr_status tsr__rpc_random(uint8_t *out, size_t n);

/* Reads a token file: its bytes, one trailing "\n" or "\r\n" dropped.
 * TSR_EIO / TSR_EINVAL (empty) / TSR_ERANGE (longer than RPC_TOKEN_MAX). */
tsr_status tsr__rpc_token_read(const char *path, rpc_token *out);

/* The proof of `side` ("client" or "server"): HMAC over the label and the
 * two nonces in the order given above. */
tsr_status tsr__rpc_auth_mac(const rpc_token *token, bool server_side,
                             const uint8_t client_nonce[RPC_NONCE_SIZE],
                             const uint8_t server_nonce[RPC_NONCE_SIZE], uint8_t mac[RPC_MAC_SIZE]);

/* Equality of two MACs in time independent of where they differ. */
bool tsr__rpc_mac_equal(const uint8_t a[RPC_MAC_SIZE], const uint8_t b[RPC_MAC_SIZE]);

#endif /* TESSERA_RPC_AUTH_H */
