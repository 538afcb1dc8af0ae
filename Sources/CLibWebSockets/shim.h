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

#endif
