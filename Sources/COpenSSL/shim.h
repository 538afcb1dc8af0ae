#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
/* OpenSSL's libcrypto (Debian libssl-dev): hashing and the CSPRNG. lws links the same library. */
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#endif
