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
#include <openssl/err.h>

/// Option macros that OR two bits do not import into Swift.
static const uint64_t CLWS_OPTION_ALLOW_NON_SSL_ON_SSL_PORT = LWS_SERVER_OPTION_ALLOW_NON_SSL_ON_SSL_PORT;
static const uint64_t CLWS_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER = LWS_SERVER_OPTION_ALLOW_HTTP_ON_HTTPS_LISTENER;
static const uint64_t CLWS_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT = LWS_SERVER_OPTION_REQUIRE_VALID_OPENSSL_CLIENT_CERT;

static inline int clws_tls_peer_certificate_der(SSL *_Nonnull ssl, unsigned char *_Nullable *_Nonnull der);

/// The DER encoding of the certificate the other end of a TLS connection presented: returns its length and sets
/// *der (free with clws_free), or returns -1 when the connection is not TLS or the peer sent no certificate.
static inline int clws_peer_certificate_der(struct lws *_Nonnull wsi, unsigned char *_Nullable *_Nonnull der) {
  *der = NULL;
  if (!lws_is_ssl(wsi)) return -1;
  SSL *ssl = lws_get_ssl(wsi);
  if (!ssl) return -1;
  return clws_tls_peer_certificate_der(ssl, der);
}

/// TLS 1.0 and 1.1 off (SSL_OP_* are macro expressions built with SSL_OP_BIT); lws takes them as a `long`.
static const long CLWS_SSL_OP_NO_OLD_PROTOCOLS = (long)(SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1);

/// OPENSSL_free is a macro.
static inline void clws_free(void *_Nullable pointer) { OPENSSL_free(pointer); }

/*
 * TLS for the connections this server dials: lws carries them as raw sockets (its WebSocket client parses what it
 * receives one byte per call), and the TLS client runs over memory BIOs here: ciphertext lws read is fed in, and
 * ciphertext to send is taken out and written through lws. BIO_* and SSL_CTX_set_min_proto_version are macros.
 */

/// A client TLS context: TLS 1.2 or later, `ciphers` for TLS 1.2, presenting `certificate`/`key` when both are given,
/// and accepting any server certificate (the caller pins it by fingerprint). NULL on failure.
static inline SSL_CTX *_Nullable clws_client_tls_context(const char *_Nullable certificate, const char *_Nullable key,
                                                         const char *_Nonnull ciphers) {
  SSL_CTX *context = SSL_CTX_new(TLS_client_method());
  if (!context) return NULL;
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_verify(context, SSL_VERIFY_NONE, NULL);
  if (SSL_CTX_set_cipher_list(context, ciphers) != 1 ||
      (certificate && key &&
       (SSL_CTX_use_certificate_chain_file(context, certificate) != 1 ||
        SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(context) != 1))) {
    SSL_CTX_free(context);
    return NULL;
  }
  return context;
}

/// A client session of `context` over two fresh memory BIOs, in connect state. NULL on failure.
static inline SSL *_Nullable clws_client_tls_session(SSL_CTX *_Nonnull context) {
  SSL *ssl = SSL_new(context);
  if (!ssl) return NULL;
  BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
  if (!in || !out) {
    BIO_free(in);
    BIO_free(out);
    SSL_free(ssl);
    return NULL;
  }
  /* An empty input BIO means "wait for more", not end of file. */
  BIO_set_mem_eof_return(in, -1);
  SSL_set_bio(ssl, in, out);
  SSL_set_connect_state(ssl);
  return ssl;
}

/// Hands `count` bytes of received ciphertext to `ssl`; returns 1, or 0 when the BIO could not take them.
static inline int clws_tls_feed(SSL *_Nonnull ssl, const void *_Nonnull bytes, int count) {
  return count <= 0 || BIO_write(SSL_get_rbio(ssl), bytes, count) == count;
}

/// Ciphertext `ssl` produced that is still to be sent.
static inline size_t clws_tls_pending_output(SSL *_Nonnull ssl) { return BIO_ctrl_pending(SSL_get_wbio(ssl)); }

/// Moves up to `capacity` bytes of ciphertext to send into `into`; returns how many.
static inline int clws_tls_take_output(SSL *_Nonnull ssl, void *_Nonnull into, int capacity) {
  int taken = BIO_read(SSL_get_wbio(ssl), into, capacity);
  return taken > 0 ? taken : 0;
}

/// The DER encoding of the certificate the other end of `ssl` presented: its length with *der set (free with
/// clws_free), or -1 when it sent none.
static inline int clws_tls_peer_certificate_der(SSL *_Nonnull ssl, unsigned char *_Nullable *_Nonnull der) {
  *der = NULL;
  X509 *cert = SSL_get1_peer_certificate(ssl);
  if (!cert) return -1;
  unsigned char *out = NULL;
  int length = i2d_X509(cert, &out);
  X509_free(cert);
  if (length <= 0) return -1;
  *der = out;
  return length;
}

/// The first error on OpenSSL's queue as text (for log lines), and the queue emptied.
static inline void clws_tls_last_error(char *_Nonnull into, size_t capacity) {
  unsigned long code = ERR_get_error();
  if (code) ERR_error_string_n(code, into, capacity); else if (capacity) into[0] = 0;
  ERR_clear_error();
}

#endif
