#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
/*
 * OpenSSL's libcrypto (Debian libssl-dev): hashing, HMAC, the CSPRNG and X.509 certificates. lws links the same
 * library. The helpers below exist because the calls they wrap are macros or variadic in OpenSSL 3 (which Swift
 * cannot import), or take many steps on raw pointers that are clearer in one place.
 */
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Writes a new self-signed certificate (EC P-256 key, SHA-256 signature, `days` valid from yesterday) with subject
 * CN=`common_name` to `cert_path` (PEM, 0644) and its key to `key_path` (PEM, created 0600, must not exist).
 * Returns 0 on success, or a negative step number on failure (files may be partly written; the caller removes them).
 */
static inline int copenssl_create_self_signed(const char *_Nonnull cert_path, const char *_Nonnull key_path,
                                              const char *_Nonnull common_name, int days) {
  int result = -1;
  EVP_PKEY *key = NULL;
  EVP_PKEY_CTX *kctx = NULL;
  X509 *cert = NULL;
  BIGNUM *serial = NULL;
  FILE *file = NULL;
  int fd = -1;

  kctx = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, NULL);
  if (!kctx || EVP_PKEY_keygen_init(kctx) <= 0) { result = -1; goto done; }
  if (EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kctx, NID_X9_62_prime256v1) <= 0) { result = -2; goto done; }
  if (EVP_PKEY_keygen(kctx, &key) <= 0) { result = -3; goto done; }

  cert = X509_new();
  serial = BN_new();
  if (!cert || !serial) { result = -4; goto done; }
  if (!X509_set_version(cert, 2)) { result = -5; goto done; }
  if (!BN_rand(serial, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY)
      || !BN_to_ASN1_INTEGER(serial, X509_get_serialNumber(cert))) { result = -6; goto done; }
  if (!X509_gmtime_adj(X509_getm_notBefore(cert), -86400)
      || !X509_gmtime_adj(X509_getm_notAfter(cert), (long)days * 86400)) { result = -7; goto done; }
  if (!X509_set_pubkey(cert, key)) { result = -8; goto done; }
  X509_NAME *name = X509_get_subject_name(cert);
  if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)common_name, -1, -1, 0)
      || !X509_set_issuer_name(cert, name)) { result = -9; goto done; }
  if (!X509_sign(cert, key, EVP_sha256())) { result = -10; goto done; }

  fd = open(key_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) { result = -11; goto done; }
  file = fdopen(fd, "w");
  if (!file) { result = -12; goto done; }
  fd = -1;
  if (!PEM_write_PrivateKey(file, key, NULL, NULL, 0, NULL, NULL)) { result = -13; goto done; }
  if (fclose(file) != 0) { file = NULL; result = -14; goto done; }
  file = fopen(cert_path, "w");
  if (!file) { result = -15; goto done; }
  if (!PEM_write_X509(file, cert)) { result = -16; goto done; }
  if (fclose(file) != 0) { file = NULL; result = -17; goto done; }
  file = NULL;
  result = 0;

done:
  if (file) fclose(file);
  if (fd >= 0) close(fd);
  BN_free(serial);
  X509_free(cert);
  EVP_PKEY_free(key);
  EVP_PKEY_CTX_free(kctx);
  return result;
}

/*
 * Reads the first PEM certificate of `cert_path` and, when `key_path` is given, checks that the PEM private key
 * there belongs to it. On success returns the DER length and sets *der (free with copenssl_free); on failure
 * returns -1 (no certificate), -2 (no key) or -3 (the key does not match the certificate).
 */
static inline int copenssl_load_certificate(const char *_Nonnull cert_path, const char *_Nullable key_path,
                                            unsigned char *_Nullable *_Nonnull der) {
  *der = NULL;
  FILE *file = fopen(cert_path, "r");
  if (!file) return -1;
  X509 *cert = PEM_read_X509(file, NULL, NULL, NULL);
  fclose(file);
  if (!cert) return -1;
  if (key_path) {
    file = fopen(key_path, "r");
    EVP_PKEY *key = file ? PEM_read_PrivateKey(file, NULL, NULL, NULL) : NULL;
    if (file) fclose(file);
    if (!key) { X509_free(cert); return -2; }
    int matches = X509_check_private_key(cert, key);
    EVP_PKEY_free(key);
    if (matches != 1) { X509_free(cert); return -3; }
  }
  unsigned char *out = NULL;
  int length = i2d_X509(cert, &out);
  X509_free(cert);
  if (length <= 0) return -1;
  *der = out;
  return length;
}

/* Frees memory OpenSSL allocated (OPENSSL_free is a macro). */
static inline void copenssl_free(void *_Nullable pointer) { OPENSSL_free(pointer); }

/* HMAC-SHA256 of `data` under `key` into `out` (32 bytes). Returns 1 on success. */
static inline int copenssl_hmac_sha256(const void *_Nullable key, int key_length, const unsigned char *_Nullable data,
                                       size_t data_length, unsigned char *_Nonnull out) {
  unsigned int out_length = 32;
  static const unsigned char empty = 0;
  return HMAC(EVP_sha256(), key ? key : &empty, key_length, data ? data : &empty, data_length, out, &out_length)
             != NULL ? 1 : 0;
}

#endif
