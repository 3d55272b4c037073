/* tests/rpc_tls_cert.c — makes a throw-away TLS certificate at test time: a
 * self-signed P-256 certificate (its own CA) and its key, as PEM files, with
 * mbedTLS (already a dependency of the RPC backend), so the TLS test needs no
 * fixture file and no openssl binary.
 */
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

bool rt_make_cert(const char *cn, const char *cert_path, const char *key_path);

static bool write_file(const char *path, const unsigned char *pem)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    const size_t n = strlen((const char *)pem);
    const bool ok = fwrite(pem, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

bool rt_make_cert(const char *cn, const char *cert_path, const char *key_path)
{
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context key;
    mbedtls_x509write_cert crt;
    mbedtls_mpi serial;
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_pk_init(&key);
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
    static unsigned char pem[8192];
    char subject[128];
    snprintf(subject, sizeof(subject), "CN=%s,O=tessera test", cn);
    bool ok = mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy,
                                    (const unsigned char *)"tessera-cert", 12) == 0 &&
              mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) == 0 &&
              mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key),
                                  mbedtls_ctr_drbg_random, &drbg) == 0 &&
              mbedtls_mpi_lset(&serial, 1) == 0;
    if (ok) {
        mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
        mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
        mbedtls_x509write_crt_set_subject_key(&crt, &key);
        mbedtls_x509write_crt_set_issuer_key(&crt, &key);
        ok = mbedtls_x509write_crt_set_serial(&crt, &serial) == 0 &&
             mbedtls_x509write_crt_set_subject_name(&crt, subject) == 0 &&
             mbedtls_x509write_crt_set_issuer_name(&crt, subject) == 0 &&
             mbedtls_x509write_crt_set_validity(&crt, "20200101000000", "20991231235959") == 0 &&
             mbedtls_x509write_crt_set_basic_constraints(&crt, 1, 0) == 0 &&
             mbedtls_x509write_crt_pem(&crt, pem, sizeof(pem), mbedtls_ctr_drbg_random, &drbg) ==
                 0 &&
             write_file(cert_path, pem) && mbedtls_pk_write_key_pem(&key, pem, sizeof(pem)) == 0 &&
             write_file(key_path, pem);
    }
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
    mbedtls_pk_free(&key);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    return ok;
}
