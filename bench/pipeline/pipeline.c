/*
 * The mandatory work of a node-to-node file transfer, done by a plain C implementation: the baseline of
 * bench/transfer.sh. Two processes play the two nodes:
 *
 *   relay (node A)    takes one HTTP upload (POST or PUT with Content-Length; the same curl command as a meshgate
 *                     upload), writes every byte to its spool file and SHA-256s it, and forwards it over a TLS link to
 *                     B; at the end it fsyncs the spool, reads B's SHA-256, compares it with its own and only then
 *                     answers the upload (200 with both digests, 500 when they differ). The client's request ends
 *                     when B has the whole file on disk, fsynced, with a matching hash.
 *   receive (node B)  reads the file from the TLS link, writes it and SHA-256s it, fsyncs, and sends its digest back.
 *
 * The link is TLS with the system OpenSSL's defaults (TLS 1.3, the default suites: what two meshgate nodes negotiate,
 * as both leave the TLS 1.3 suites alone), both sides presenting the same kind of certificate (EC P-256) as meshgate
 * nodes do, mutually. Either side may be the TLS server (--listen) or client (--connect), so both directions of a
 * meshgate link are mirrored. On the link: an 8-byte big-endian length, the file, then B's 32-byte digest back.
 *
 * Each node has two threads: the network thread (socket reads, TLS) and a disk thread (write() and SHA-256 of each
 * block, fsync at the end), joined by a bounded pool of 16 blocks of 256 KiB (4 MiB per node). A block holds what has
 * arrived when the network thread gets to it (up to 256 KiB; it does not wait to fill one), so the first bytes go on at
 * once and a busy stream moves in whole blocks. Every byte is read from the client socket once, written and hashed
 * once on each node, encrypted once and decrypted once. Nothing is skipped: no kTLS offload, no splice, no hashing
 * shortcut. Not done (meshgate does it, no transfer must): per-chunk framing, the WebSocket mask, reading the spool
 * back to send it, resume bookkeeping, events.
 *
 * usage: pipeline relay   --file SPOOL  (--listen | --connect PORT) --cert PEM --key PEM [--timeout S]
 *        pipeline receive --file TARGET (--listen | --connect PORT) --cert PEM --key PEM [--timeout S]
 * Prints on stdout: "tls-port=N" (with --listen, once listening), "ready" (B) or "ready http-port=N" (A) once the
 * link is up, and at the end one line "result role=... bytes=N sha256=HEX first_write_ns=T maxrss_kib=K
 * protocol=... cipher=...". Exit status 0 on success, 1 on any failure (the reason on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { BLOCK = 256 * 1024, BLOCKS = 16, HEAD_MAX = 64 * 1024, DIGEST = 32 };

static const char *role = "pipeline";

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "pipeline %s: ", role);
  vfprintf(stderr, format, args);
  va_end(args);
  fputc('\n', stderr);
  ERR_print_errors_fp(stderr);
  exit(1);
}

static void on_alarm(int signal) {
  (void)signal;
  static const char message[] = "pipeline: timed out (--timeout); is the other node or the client gone?\n";
  (void)!write(2, message, sizeof message - 1);
  _exit(1);
}

static uint64_t realtime_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* ---- the block pool and the disk thread ---------------------------------------------------------------------- */

struct block {
  unsigned char *data;
  size_t length;
  int references; /* the network thread and/or the disk thread still using it */
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  struct block blocks[BLOCKS];
  int queue[BLOCKS]; /* blocks for the disk thread, in order */
  int queue_head, queue_count;
  int ended; /* no more blocks will be queued */
  int fd;
  const char *path;
  EVP_MD_CTX *hash;
  unsigned char digest[DIGEST];
  uint64_t written;
  uint64_t first_write_ns;
  const char *failure;
  int failure_errno;
} disk = {.lock = PTHREAD_MUTEX_INITIALIZER, .changed = PTHREAD_COND_INITIALIZER};

/* A free block for the network thread to fill (waits while all are in use). */
static struct block *block_take(void) {
  pthread_mutex_lock(&disk.lock);
  for (;;) {
    if (disk.failure) {
      pthread_mutex_unlock(&disk.lock);
      errno = disk.failure_errno;
      die("%s %s: %s", disk.failure, disk.path, strerror(disk.failure_errno));
    }
    for (int i = 0; i < BLOCKS; i++) {
      if (disk.blocks[i].references == 0) {
        disk.blocks[i].references = 1;
        pthread_mutex_unlock(&disk.lock);
        return &disk.blocks[i];
      }
    }
    pthread_cond_wait(&disk.changed, &disk.lock);
  }
}

static void block_release(struct block *block) {
  pthread_mutex_lock(&disk.lock);
  block->references--;
  pthread_cond_broadcast(&disk.changed);
  pthread_mutex_unlock(&disk.lock);
}

/* Hands a filled block to the disk thread (one more reference, for it). */
static void block_queue(struct block *block) {
  pthread_mutex_lock(&disk.lock);
  block->references++;
  disk.queue[(disk.queue_head + disk.queue_count) % BLOCKS] = (int)(block - disk.blocks);
  disk.queue_count++;
  pthread_cond_broadcast(&disk.changed);
  pthread_mutex_unlock(&disk.lock);
}

static void disk_fail(const char *what) {
  pthread_mutex_lock(&disk.lock);
  disk.failure = what;
  disk.failure_errno = errno;
  pthread_cond_broadcast(&disk.changed);
  pthread_mutex_unlock(&disk.lock);
}

/* Writes and hashes each queued block in order; at the end fsyncs and finishes the digest. */
static void *disk_thread(void *unused) {
  (void)unused;
  for (;;) {
    pthread_mutex_lock(&disk.lock);
    while (disk.queue_count == 0 && !disk.ended) pthread_cond_wait(&disk.changed, &disk.lock);
    if (disk.queue_count == 0) {
      pthread_mutex_unlock(&disk.lock);
      break;
    }
    struct block *block = &disk.blocks[disk.queue[disk.queue_head]];
    disk.queue_head = (disk.queue_head + 1) % BLOCKS;
    disk.queue_count--;
    pthread_mutex_unlock(&disk.lock);

    for (size_t done = 0; done < block->length;) {
      ssize_t n = write(disk.fd, block->data + done, block->length - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        disk_fail("cannot write");
        return NULL;
      }
      done += (size_t)n;
    }
    if (disk.first_write_ns == 0) disk.first_write_ns = realtime_ns();
    if (EVP_DigestUpdate(disk.hash, block->data, block->length) != 1) {
      disk_fail("cannot hash");
      return NULL;
    }
    disk.written += block->length;
    block_release(block);
  }
  if (fsync(disk.fd) != 0) {
    disk_fail("cannot fsync");
    return NULL;
  }
  if (EVP_DigestFinal_ex(disk.hash, disk.digest, NULL) != 1) disk_fail("cannot hash");
  return NULL;
}

static void disk_start(pthread_t *thread, const char *path) {
  disk.path = path;
  disk.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (disk.fd < 0) die("cannot create %s: %s", path, strerror(errno));
  disk.hash = EVP_MD_CTX_new();
  if (!disk.hash || EVP_DigestInit_ex(disk.hash, EVP_sha256(), NULL) != 1) die("cannot start SHA-256");
  for (int i = 0; i < BLOCKS; i++) {
    disk.blocks[i].data = malloc(BLOCK);
    if (!disk.blocks[i].data) die("out of memory");
  }
  if (pthread_create(thread, NULL, disk_thread, NULL) != 0) die("cannot start the disk thread");
}

/* Ends the queue, waits for the disk thread (fsync and digest); dies if it failed. */
static void disk_finish(pthread_t thread) {
  pthread_mutex_lock(&disk.lock);
  disk.ended = 1;
  pthread_cond_broadcast(&disk.changed);
  pthread_mutex_unlock(&disk.lock);
  pthread_join(thread, NULL);
  if (disk.failure) die("%s %s: %s", disk.failure, disk.path, strerror(disk.failure_errno));
  close(disk.fd);
}

/* ---- sockets and TLS ------------------------------------------------------------------------------------------- */

static int listen_loopback(int *port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("cannot create a socket: %s", strerror(errno));
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t length = sizeof address;
  if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, (struct sockaddr *)&address, &length) != 0)
    die("cannot listen on 127.0.0.1: %s", strerror(errno));
  *port = ntohs(address.sin_port);
  return fd;
}

static void no_delay(int fd) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

static int accept_one(int listener) {
  int fd;
  while ((fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC)) < 0 && errno == EINTR) {}
  if (fd < 0) die("cannot accept: %s", strerror(errno));
  no_delay(fd);
  return fd;
}

static int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("cannot create a socket: %s", strerror(errno));
  struct sockaddr_in address = {
    .sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0)
    die("cannot connect to 127.0.0.1:%d: %s", port, strerror(errno));
  no_delay(fd);
  return fd;
}

/* Any certificate is accepted (meshgate pins fingerprints instead; self-signed on both ends). */
static int accept_any(int preverified, X509_STORE_CTX *context) {
  (void)preverified;
  (void)context;
  return 1;
}

/* The TLS link: the TCP connection made (--connect) or accepted (--listen), then the handshake, mutual. */
static SSL *tls_link(int listen, int connect_port, const char *cert, const char *key) {
  SSL_CTX *context = SSL_CTX_new(listen ? TLS_server_method() : TLS_client_method());
  if (!context) die("cannot create a TLS context");
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER, accept_any);
  if (SSL_CTX_use_certificate_chain_file(context, cert) != 1 ||
      SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(context) != 1)
    die("cannot load the certificate %s and key %s", cert, key);
  int fd;
  if (listen) {
    int port;
    int listener = listen_loopback(&port);
    printf("tls-port=%d\n", port);
    fflush(stdout);
    fd = accept_one(listener);
    close(listener);
  } else {
    fd = connect_loopback(connect_port);
  }
  SSL *ssl = SSL_new(context);
  if (!ssl || SSL_set_fd(ssl, fd) != 1) die("cannot create a TLS session");
  if ((listen ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) die("the TLS handshake failed");
  return ssl;
}

static void tls_write_all(SSL *ssl, const void *bytes, size_t count) {
  /* Blocking, no partial writes: SSL_write returns only when all of it is sent (as 16 KiB records). */
  if (count > 0 && SSL_write(ssl, bytes, (int)count) != (int)count) die("cannot write to the TLS link");
}

/* Reads exactly `count` bytes from the TLS link. */
static void tls_read_all(SSL *ssl, void *into, size_t count) {
  for (size_t got = 0; got < count;) {
    int n = SSL_read(ssl, (unsigned char *)into + got, (int)(count - got));
    if (n <= 0) die("the TLS link ended after %zu of %zu bytes", got, count);
    got += (size_t)n;
  }
}

static void hex(const unsigned char *digest, char *out) {
  for (int i = 0; i < DIGEST; i++) sprintf(out + 2 * i, "%02x", digest[i]);
}

static void report(SSL *ssl, uint64_t bytes) {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  char digest[2 * DIGEST + 1];
  hex(disk.digest, digest);
  printf("result role=%s bytes=%llu sha256=%s first_write_ns=%llu maxrss_kib=%ld protocol=%s cipher=%s\n", role,
         (unsigned long long)bytes, digest, (unsigned long long)disk.first_write_ns, usage.ru_maxrss,
         SSL_get_version(ssl), SSL_get_cipher_name(ssl));
  fflush(stdout);
}

/* ---- node B ------------------------------------------------------------------------------------------------------ */

static void receive(SSL *ssl, const char *path) {
  printf("ready\n");
  fflush(stdout);
  unsigned char header[8];
  tls_read_all(ssl, header, sizeof header);
  uint64_t size = 0;
  for (int i = 0; i < 8; i++) size = size << 8 | header[i];
  pthread_t thread;
  disk_start(&thread, path);
  struct pollfd link = {.fd = SSL_get_fd(ssl), .events = POLLIN};
  for (uint64_t left = size; left > 0;) {
    /* A block holds what has arrived, up to 256 KiB: while more is decrypted or waiting in the socket, read on. */
    struct block *block = block_take();
    size_t want = left < BLOCK ? (size_t)left : BLOCK, have = 0;
    do {
      int n = SSL_read(ssl, block->data + have, (int)(want - have));
      if (n <= 0) die("the TLS link ended after %llu of %llu bytes", (unsigned long long)(size - left + have),
                      (unsigned long long)size);
      have += (size_t)n;
    } while (have < want && (SSL_pending(ssl) > 0 || poll(&link, 1, 0) > 0));
    block->length = have;
    left -= have;
    block_queue(block);
    block_release(block);
  }
  disk_finish(thread);
  tls_write_all(ssl, disk.digest, DIGEST);
  /* Wait for A's close: it has the digest then. */
  unsigned char rest;
  while (SSL_read(ssl, &rest, 1) > 0) {}
  report(ssl, disk.written);
}

/* ---- node A ------------------------------------------------------------------------------------------------------ */

static void answer(int client, int status, const char *reason, const char *body) {
  char head[256];
  int length = snprintf(head, sizeof head,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n\r\n",
                        status, reason, strlen(body));
  if (write(client, head, (size_t)length) != length || write(client, body, strlen(body)) != (ssize_t)strlen(body))
    die("cannot answer the upload: %s", strerror(errno));
}

/* Reads the request head; returns the Content-Length and leaves the body bytes read with it in `body`. */
static uint64_t read_request(int client, char *head, size_t *body_offset, size_t *got) {
  *got = 0;
  for (;;) {
    if (*got == HEAD_MAX) {
      answer(client, 431, "Request Header Fields Too Large", "{\"error\":\"the request head is over 64 KiB\"}");
      die("the request head is over %d bytes", HEAD_MAX);
    }
    ssize_t n = recv(client, head + *got, HEAD_MAX - *got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die("the client closed before the end of its request head");
    *got += (size_t)n;
    char *end = memmem(head, *got, "\r\n\r\n", 4);
    if (!end) continue;
    *end = 0;
    *body_offset = (size_t)(end + 4 - head);
    break;
  }
  if (strncmp(head, "POST ", 5) != 0 && strncmp(head, "PUT ", 4) != 0) {
    answer(client, 405, "Method Not Allowed", "{\"error\":\"upload with POST or PUT\"}");
    die("the request is not a POST or PUT");
  }
  for (char *line = strstr(head, "\r\n"); line; line = strstr(line + 2, "\r\n")) {
    if (strncasecmp(line + 2, "content-length:", 15) == 0) return strtoull(line + 17, NULL, 10);
  }
  answer(client, 411, "Length Required", "{\"error\":\"send the file with a Content-Length\"}");
  die("the request has no Content-Length (chunked uploads are not taken)");
}

static void relay(SSL *ssl, const char *path) {
  int http_port;
  int listener = listen_loopback(&http_port);
  printf("ready http-port=%d\n", http_port);
  fflush(stdout);
  int client = accept_one(listener);
  close(listener);

  char *head = malloc(HEAD_MAX);
  if (!head) die("out of memory");
  size_t body_offset, got;
  uint64_t size = read_request(client, head, &body_offset, &got);
  unsigned char header[8];
  for (int i = 0; i < 8; i++) header[i] = (unsigned char)(size >> (56 - 8 * i));
  tls_write_all(ssl, header, sizeof header);

  pthread_t thread;
  disk_start(&thread, path);
  size_t early = got - body_offset; /* body bytes that came with the head */
  if (early > size) early = (size_t)size;
  uint64_t left = size;
  while (left > 0) {
    struct block *block = block_take();
    size_t want = left < BLOCK ? (size_t)left : BLOCK, have = 0;
    if (early > 0) {
      have = early < want ? early : want;
      memcpy(block->data, head + body_offset, have);
      body_offset += have;
      early -= have;
    }
    /* A block holds what has arrived, up to 256 KiB: wait for some bytes, then take what else is there. */
    while (have < want) {
      ssize_t n = recv(client, block->data + have, want - have, have == 0 ? 0 : MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) die("the client closed after %llu of %llu bytes", (unsigned long long)(size - left + have),
                      (unsigned long long)size);
      have += (size_t)n;
    }
    block->length = have;
    left -= have;
    block_queue(block);
    tls_write_all(ssl, block->data, have);
    block_release(block);
  }
  free(head);
  disk_finish(thread);

  unsigned char theirs[DIGEST];
  tls_read_all(ssl, theirs, DIGEST);
  char mine_hex[2 * DIGEST + 1], theirs_hex[2 * DIGEST + 1], body[256];
  hex(disk.digest, mine_hex);
  hex(theirs, theirs_hex);
  int same = memcmp(theirs, disk.digest, DIGEST) == 0;
  snprintf(body, sizeof body, "{\"bytes\":%llu,\"sha256\":\"%s\",\"receivedSha256\":\"%s\"}", (unsigned long long)size,
           mine_hex, theirs_hex);
  if (same) answer(client, 200, "OK", body);
  else answer(client, 500, "Internal Server Error", body);
  close(client);
  SSL_shutdown(ssl);
  report(ssl, disk.written);
  if (!same) die("SHA-256 differs: A %s, B %s", mine_hex, theirs_hex);
}

int main(int argc, char **argv) {
  const char *file = NULL, *cert = NULL, *key = NULL;
  int listen = 0, connect_port = 0;
  long timeout = 600;
  if (argc < 2 || (strcmp(argv[1], "relay") != 0 && strcmp(argv[1], "receive") != 0)) goto usage;
  role = argv[1];
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--listen") == 0) listen = 1;
    else if (i + 1 >= argc) goto usage;
    else if (strcmp(argv[i], "--file") == 0) file = argv[++i];
    else if (strcmp(argv[i], "--connect") == 0) connect_port = atoi(argv[++i]);
    else if (strcmp(argv[i], "--cert") == 0) cert = argv[++i];
    else if (strcmp(argv[i], "--key") == 0) key = argv[++i];
    else if (strcmp(argv[i], "--timeout") == 0) timeout = atol(argv[++i]);
    else goto usage;
  }
  if (!file || !cert || !key || listen == (connect_port > 0) || timeout <= 0) goto usage;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGALRM, on_alarm);
  alarm((unsigned)timeout);
  SSL *ssl = tls_link(listen, connect_port, cert, key);
  if (strcmp(role, "relay") == 0) relay(ssl, file);
  else receive(ssl, file);
  return 0;
usage:
  fprintf(stderr,
          "usage: pipeline relay|receive --file PATH (--listen | --connect PORT) --cert PEM --key PEM [--timeout S]\n"
          "  relay: takes one HTTP upload (POST/PUT with Content-Length) on 127.0.0.1 and forwards it over TLS;\n"
          "  receive: writes what comes over the TLS link to PATH. See the comment at the top of pipeline.c.\n");
  return 2;
}
