#ifndef CTESTTLS_SHIM_H
#define CTESTTLS_SHIM_H
/*
 * Test-only TLS client over OpenSSL's libssl (Debian libssl-dev), for the hostile mesh node in MeshgateTestSupport.
 * A meshgate node's mesh links are mutual TLS with self-signed certificates identified by fingerprint, so this
 * client presents a certificate and checks nothing about the server's (as the real node does). Helpers exist
 * where OpenSSL's calls are macros or take several steps on raw pointers.
 */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/*
 * A client context presenting `cert_path` / `key_path` (PEM) and verifying nothing. NULL on failure.
 * Free with ctesttls_context_free.
 */
static inline SSL_CTX *_Nullable ctesttls_client_context(const char *_Nonnull cert_path,
                                                         const char *_Nonnull key_path) {
  SSL_CTX *context = SSL_CTX_new(TLS_client_method());
  if (!context) return NULL;
  SSL_CTX_set_verify(context, SSL_VERIFY_NONE, NULL);
  if (SSL_CTX_use_certificate_file(context, cert_path, SSL_FILETYPE_PEM) != 1
      || SSL_CTX_use_PrivateKey_file(context, key_path, SSL_FILETYPE_PEM) != 1) {
    SSL_CTX_free(context);
    return NULL;
  }
  return context;
}

static inline void ctesttls_context_free(SSL_CTX *_Nullable context) { SSL_CTX_free(context); }

/*
 * Runs a client handshake on the connected, blocking socket `fd`. NULL on failure (the socket stays open).
 * Free with ctesttls_free.
 */
static inline SSL *_Nullable ctesttls_connect(SSL_CTX *_Nonnull context, int fd) {
  SSL *ssl = SSL_new(context);
  if (!ssl) return NULL;
  if (SSL_set_fd(ssl, fd) != 1 || SSL_connect(ssl) != 1) {
    ERR_clear_error();
    SSL_free(ssl);
    return NULL;
  }
  return ssl;
}

/* Bytes already decrypted and waiting in `ssl`. */
static inline int ctesttls_pending(SSL *_Nonnull ssl) { return SSL_pending(ssl); }

/* Reads up to `count` bytes: > 0 bytes read, 0 the peer closed, -1 would block (timeout), -2 an error. */
static inline int ctesttls_read(SSL *_Nonnull ssl, void *_Nonnull buffer, int count) {
  int result = SSL_read(ssl, buffer, count);
  if (result > 0) return result;
  int error = SSL_get_error(ssl, result);
  ERR_clear_error();
  if (error == SSL_ERROR_ZERO_RETURN) return 0;
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return -1;
  return -2;
}

/* Writes all `count` bytes (blocking socket). Returns 1 on success, 0 on failure. */
static inline int ctesttls_write_all(SSL *_Nonnull ssl, const void *_Nonnull buffer, int count) {
  int written = 0;
  while (written < count) {
    int result = SSL_write(ssl, (const char *)buffer + written, count - written);
    if (result <= 0) {
      int error = SSL_get_error(ssl, result);
      ERR_clear_error();
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) continue;
      return 0;
    }
    written += result;
  }
  return 1;
}

static inline void ctesttls_free(SSL *_Nullable ssl) {
  if (ssl) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
  }
}

#endif
