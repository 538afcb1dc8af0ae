#ifndef CLIBWEBSOCKETS_SHIM_H
#define CLIBWEBSOCKETS_SHIM_H

/*
 * Debian's libwebsockets 4.1.6 imports cleanly into Swift; what does not are
 * macros (computed constants, variadic logging macros, container_of). Each
 * helper below exists for exactly one such reason.
 */
#include <libwebsockets.h>
#include <stdio.h>

/// `LWS_PRE` is a macro expression (`_LWS_PAD(...)`); Swift cannot import it.
static const size_t CLWS_PRE = LWS_PRE;

/// `LWS_ILLEGAL_HTTP_CONTENT_LEN` is `(lws_filepos_t)-1ll`, which Swift rejects as an overflowing literal.
static const lws_filepos_t CLWS_ILLEGAL_HTTP_CONTENT_LEN = LWS_ILLEGAL_HTTP_CONTENT_LEN;

/// Glibc's `stdout` is a mutable global that Swift 6 refuses to touch; make it line-buffered from C.
static inline void clws_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/*
 * lws timers hand the callback the `lws_sorted_usec_list_t *`; C code gets back to
 * its object with lws_container_of(), a macro. Embedding the sul as the FIRST
 * member of a struct with an owner pointer makes `sul *` == `clws_sul_t *`.
 */
typedef struct clws_sul {
  lws_sorted_usec_list_t sul;
  void *_Nullable owner;
} clws_sul_t;

/*
 * TLS (OpenSSL under lws). Node certificates are self-signed and pinned by fingerprint above lws, so certificate
 * chain verification is switched off here, in both directions, and the peer's certificate is read back as DER.
 */
#include <openssl/ssl.h>
#include <openssl/x509.h>

/// Option macros that OR two bits do not import into Swift.
static const uint64_t CLWS_OPTION_ALLOW_NON_SSL_ON_SSL_PORT = LWS_SERVER_OPTION_ALLOW_NON_SSL_ON_SSL_PORT;
static const uint64_t CLWS_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER = LWS_SERVER_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER;
static const uint64_t CLWS_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT = LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT;

/// Marks an OpenSSL verification step as passed (`user` of LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION).
static inline void clws_accept_certificate(void *_Nullable x509_store_ctx) {
  if (x509_store_ctx) X509_STORE_CTX_set_error((X509_STORE_CTX *)x509_store_ctx, X509_V_OK);
}

/// The DER encoding of the certificate the other end of a TLS connection presented: returns its length and sets
/// *der (free with clws_free), or returns -1 when the connection is not TLS or the peer sent no certificate.
static inline int clws_peer_certificate_der(struct lws *_Nonnull wsi, unsigned char *_Nullable *_Nonnull der) {
  *der = NULL;
  if (!lws_is_ssl(wsi)) return -1;
  SSL *ssl = lws_get_ssl(wsi);
  if (!ssl) return -1;
  X509 *cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return -1;
  unsigned char *out = NULL;
  int length = i2d_X509(cert, &out);
  X509_free(cert);
  if (length <= 0) return -1;
  *der = out;
  return length;
}

/// TLS 1.0 and 1.1 off (SSL_OP_* are macro expressions built with SSL_OP_BIT); lws takes them as a `long`.
static const long CLWS_SSL_OP_NO_OLD_PROTOCOLS = (long)(SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1);

/// OPENSSL_free is a macro.
static inline void clws_free(void *_Nullable pointer) { OPENSSL_free(pointer); }

#endif
