/*
 * wsload: a small WebSocket broadcast load generator for meshgate's benchmarks.
 *
 * Plain POSIX sockets + epoll, no libraries, one thread. It opens N subscriber
 * connections and one publisher connection, the publisher sends M text messages
 * whose payload (S bytes) carries a sequence number and a CLOCK_MONOTONIC send
 * timestamp, and every subscriber checks it saw every message once, in order.
 *
 *   payload = "#WSL" seq(10 digits) ":" send_ns(20 digits) ":" then 'x' up to S bytes
 *
 * '#' is not in the base64 alphabet, so the marker is found inside any JSON
 * envelope (meshgate's session.data event carries it in data.text). Records cut
 * in two by a server (lws-mirror re-broadcasts each 4 KB read chunk) are
 * reassembled by carrying an incomplete header over to the next message.
 *
 * Flow: at most --window messages are in flight (sent, not yet seen by every
 * subscriber); with --rate R the publisher also paces to R messages/s.
 * Reports delivered messages/s, latency p50/p90/p99/max, losses, duplicates,
 * reordering, its own CPU time and the server's (from /proc/PID/stat).
 *
 * --hold SECONDS with -m 0 just opens the connections and keeps them idle
 * (for memory-per-client measurements); it prints "wsload connected N" when all
 * are upgraded.
 *
 * Client frames are masked with a fixed all-zero key (legal per RFC 6455 5.3;
 * servers must unmask whatever the key is) so the generator spends no CPU on it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HDR_LEN 36 /* "#WSL" + 10 + ":" + 20 + ":" */
#define MAX_HEADERS 16

enum { ST_CONNECTING, ST_HANDSHAKE, ST_OPEN, ST_CLOSED };

typedef struct {
  int fd;
  int idx; /* -1 = publisher */
  int state;
  char *url_host, *url_path;
  int url_port;
  unsigned char *rbuf; /* raw bytes read, not yet parsed */
  size_t rlen, rcap;
  unsigned char *msg; /* reassembled fragmented message */
  size_t mlen, mcap;
  int msg_opcode;
  unsigned char *wbuf; /* pending writes */
  size_t wlen, woff, wcap;
  char carry[HDR_LEN];
  int carry_len;
  /* subscriber accounting */
  long long next_seq; /* next expected seq */
  long long received, lost, dup, fragments_ignored, messages;
  int ready; /* got first message (for --ready-first) */
} conn_t;

static struct {
  int n_subs;
  long long m_msgs;
  int size;
  double rate;
  int window;
  double timeout;
  double hold;
  double settle;
  int ready_first;
  int server_pids[8]; /* --server-pid A[,B...]: CPU is summed over these processes */
  int server_pid_count;
  int max_connecting;
  const char *protocol;
  const char *headers[MAX_HEADERS];
  int n_headers;
  const char *tmpl;
  const char *label;
} opt = {.n_subs = 10, .m_msgs = 1000, .size = 64, .window = 64, .timeout = 20, .settle = 0.2, .max_connecting = 64,
         .tmpl = "%s", .label = "run"};

static conn_t *subs, pub;
static int ep;
static uint32_t *lat_us; /* one sample per delivery */
static long long n_lat, lat_cap;
static long long sent_count;
static char *prefix, *suffix;
static size_t prefix_len, suffix_len;

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "wsload: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static double self_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double proc_cpu_s(int pid) {
  if (pid <= 0) return -1;
  char path[64], buf[2048];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* comm may contain spaces */
  if (!p) return -1;
  unsigned long utime = 0, stime = 0;
  /* after ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return -1;
  return (double)(utime + stime) / sysconf(_SC_CLK_TCK);
}

/* The CPU time of every --server-pid process, summed; -1 when none is given or one cannot be read. */
static double servers_cpu_s(const int *pids, int count) {
  if (count == 0) return -1;
  double total = 0;
  for (int i = 0; i < count; i++) {
    double cpu = proc_cpu_s(pids[i]);
    if (cpu < 0) return -1;
    total += cpu;
  }
  return total;
}

static void grow(unsigned char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return;
  size_t c = *cap ? *cap : 4096;
  while (c < need) c *= 2;
  *buf = realloc(*buf, c);
  if (!*buf) die("out of memory");
  *cap = c;
}

static void parse_url(const char *url, char **host, int *port, char **path) {
  if (strncmp(url, "ws://", 5) != 0) die("only ws:// URLs are supported: %s", url);
  const char *h = url + 5;
  const char *slash = strchr(h, '/');
  size_t hl = slash ? (size_t)(slash - h) : strlen(h);
  char hostport[256];
  if (hl >= sizeof hostport) die("host too long");
  memcpy(hostport, h, hl);
  hostport[hl] = 0;
  char *colon = strrchr(hostport, ':');
  *port = 80;
  if (colon) {
    *colon = 0;
    *port = atoi(colon + 1);
  }
  *host = strdup(hostport);
  *path = strdup(slash ? slash : "/");
}

static void queue_write(conn_t *c, const void *data, size_t len) {
  if (c->woff == c->wlen) c->woff = c->wlen = 0;
  grow(&c->wbuf, &c->wcap, c->wlen + len);
  memcpy(c->wbuf + c->wlen, data, len);
  c->wlen += len;
}

static void update_events(conn_t *c) {
  struct epoll_event ev = {.events = EPOLLIN | (c->woff < c->wlen ? EPOLLOUT : 0), .data.ptr = c};
  epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void close_conn(conn_t *c, const char *why) {
  if (c->state == ST_CLOSED) return;
  if (why && *why) fprintf(stderr, "wsload: connection %d closed: %s\n", c->idx, why);
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  c->state = ST_CLOSED;
}

static void flush_writes(conn_t *c) {
  while (c->woff < c->wlen) {
    ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      close_conn(c, strerror(errno));
      return;
    }
    c->woff += (size_t)w;
  }
  update_events(c);
}

static int start_connect(conn_t *c) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
  char port[16];
  snprintf(port, sizeof port, "%d", c->url_port);
  if (getaddrinfo(c->url_host, port, &hints, &ai) != 0) die("cannot resolve %s", c->url_host);
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) die("socket: %s (raise ulimit -n?)", strerror(errno));
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int r = connect(c->fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (r < 0 && errno != EINPROGRESS) die("connect: %s", strerror(errno));
  c->state = ST_CONNECTING;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
  epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
  /* the upgrade request goes out as soon as the socket is writable */
  char req[4096];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: d3Nsb2FkLWJlbmNoLWtleQ==\r\nSec-WebSocket-Version: 13\r\n",
                   c->url_path, c->url_host, c->url_port);
  if (opt.protocol) n += snprintf(req + n, sizeof req - n, "Sec-WebSocket-Protocol: %s\r\n", opt.protocol);
  for (int i = 0; i < opt.n_headers; i++) n += snprintf(req + n, sizeof req - n, "%s\r\n", opt.headers[i]);
  n += snprintf(req + n, sizeof req - n, "\r\n");
  queue_write(c, req, (size_t)n);
  return 0;
}

static void send_frame(conn_t *c, int opcode, const void *data, size_t len) {
  unsigned char h[14];
  size_t hl = 0;
  h[hl++] = 0x80 | (unsigned char)opcode;
  if (len < 126) {
    h[hl++] = 0x80 | (unsigned char)len;
  } else if (len < 65536) {
    h[hl++] = 0x80 | 126;
    h[hl++] = (unsigned char)(len >> 8);
    h[hl++] = (unsigned char)len;
  } else {
    h[hl++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--) h[hl++] = (unsigned char)((uint64_t)len >> (8 * i));
  }
  memset(h + hl, 0, 4); /* zero masking key: payload goes as is */
  hl += 4;
  queue_write(c, h, hl);
  queue_write(c, data, len);
}


static void record(conn_t *c, long long seq, uint64_t sent_ns, uint64_t t) {
  if (seq < c->next_seq) {
    c->dup++;
    return;
  }
  if (seq > c->next_seq) c->lost += seq - c->next_seq;
  c->next_seq = seq + 1;
  c->received++;
  if (n_lat < lat_cap) {
    uint64_t d = t > sent_ns ? (t - sent_ns) / 1000 : 0;
    lat_us[n_lat++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
  }
}

static int parse_header(const char *p, long long *seq, uint64_t *ts) {
  if (memcmp(p, "#WSL", 4) != 0 || p[14] != ':' || p[35] != ':') return 0;
  long long s = 0;
  uint64_t t = 0;
  for (int i = 4; i < 14; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    s = s * 10 + (p[i] - '0');
  }
  for (int i = 15; i < 35; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    t = t * 10 + (uint64_t)(p[i] - '0');
  }
  *seq = s;
  *ts = t;
  return 1;
}

/* one complete WebSocket data message for a subscriber */
static void on_message(conn_t *c, const unsigned char *data, size_t len) {
  c->messages++;
  c->ready = 1;
  if (c->idx < 0) return; /* publisher: replies / its own echo are discarded */
  uint64_t t = now_ns();
  const char *p = (const char *)data, *end = p + len;
  int found = 0;
  if (c->carry_len) { /* a header cut at the end of the previous message */
    char tmp[HDR_LEN];
    size_t need = HDR_LEN - (size_t)c->carry_len;
    if (len >= need) {
      memcpy(tmp, c->carry, (size_t)c->carry_len);
      memcpy(tmp + c->carry_len, p, need);
      long long seq;
      uint64_t ts;
      if (parse_header(tmp, &seq, &ts)) {
        record(c, seq, ts, t);
        found = 1;
      }
    }
    c->carry_len = 0;
  }
  while (p < end) {
    const char *m = memmem(p, (size_t)(end - p), "#WSL", 4);
    if (!m) {
      /* a marker cut inside its first 4 bytes? keep a '#' / "#W" / "#WS" tail */
      for (int k = 3; k >= 1; k--)
        if (len >= (size_t)k && memcmp(end - k, "#WSL", (size_t)k) == 0) {
          memcpy(c->carry, end - k, (size_t)k);
          c->carry_len = k;
          break;
        }
      break;
    }
    if (end - m < HDR_LEN) {
      memcpy(c->carry, m, (size_t)(end - m));
      c->carry_len = (int)(end - m);
      break;
    }
    long long seq;
    uint64_t ts;
    if (parse_header(m, &seq, &ts)) {
      record(c, seq, ts, t);
      found = 1;
      p = m + HDR_LEN;
    } else {
      p = m + 1;
    }
  }
  if (!found) c->fragments_ignored++;
}

static void handle_frames(conn_t *c) {
  size_t off = 0;
  while (c->rlen - off >= 2) {
    unsigned char *b = c->rbuf + off;
    int fin = b[0] & 0x80, opcode = b[0] & 0x0f, masked = b[1] & 0x80;
    uint64_t len = b[1] & 0x7f;
    size_t hl = 2;
    if (len == 126) {
      if (c->rlen - off < 4) break;
      len = ((uint64_t)b[2] << 8) | b[3];
      hl = 4;
    } else if (len == 127) {
      if (c->rlen - off < 10) break;
      len = 0;
      for (int i = 0; i < 8; i++) len = (len << 8) | b[2 + i];
      hl = 10;
    }
    if (masked) hl += 4;
    if (c->rlen - off < hl + len) break;
    unsigned char *payload = b + hl;
    if (masked)
      for (uint64_t i = 0; i < len; i++) payload[i] ^= b[hl - 4 + (i & 3)];
    if (opcode == 0x8) {
      close_conn(c, c->idx < 0 || sent_count < opt.m_msgs ? "server sent close" : "");
      return;
    } else if (opcode == 0x9) {
      send_frame(c, 0xA, payload, len);
      flush_writes(c);
    } else if (opcode == 0xA) {
      /* pong: ignore */
    } else if (opcode == 0x0 || opcode == 0x1 || opcode == 0x2) {
      if (fin && opcode != 0 && c->mlen == 0) {
        on_message(c, payload, len);
      } else {
        grow(&c->msg, &c->mcap, c->mlen + len);
        memcpy(c->msg + c->mlen, payload, len);
        c->mlen += len;
        if (fin) {
          on_message(c, c->msg, c->mlen);
          c->mlen = 0;
        }
      }
    }
    off += hl + len;
  }
  if (off) {
    memmove(c->rbuf, c->rbuf + off, c->rlen - off);
    c->rlen -= off;
  }
}

static int n_open, n_connecting;

static void on_readable(conn_t *c) {
  for (;;) {
    grow(&c->rbuf, &c->rcap, c->rlen + 65536);
    ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      close_conn(c, strerror(errno));
      return;
    }
    if (r == 0) {
      close_conn(c, c->idx < 0 || sent_count < opt.m_msgs || c->state != ST_OPEN ? "eof" : "");
      return;
    }
    c->rlen += (size_t)r;
    if (c->state == ST_HANDSHAKE || c->state == ST_CONNECTING) {
      unsigned char *e = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
      if (!e) continue;
      if (c->rlen < 12 || memcmp(c->rbuf + 9, "101", 3) != 0) {
        int l = (int)(e - c->rbuf);
        fprintf(stderr, "wsload: upgrade refused: %.*s\n", l > 300 ? 300 : l, (char *)c->rbuf);
        exit(3);
      }
      size_t hl = (size_t)(e + 4 - c->rbuf);
      memmove(c->rbuf, c->rbuf + hl, c->rlen - hl);
      c->rlen -= hl;
      c->state = ST_OPEN;
      n_open++;
      n_connecting--;
    }
    if (c->state == ST_OPEN) handle_frames(c);
    if (c->state == ST_CLOSED) return;
    if ((size_t)r < 65536) break;
  }
}

static void pump(int timeout_ms) {
  struct epoll_event evs[256];
  int n = epoll_wait(ep, evs, 256, timeout_ms);
  for (int i = 0; i < n; i++) {
    conn_t *c = evs[i].data.ptr;
    if (c->state == ST_CLOSED) continue;
    if (evs[i].events & (EPOLLERR)) {
      int err = 0;
      socklen_t l = sizeof err;
      getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
      close_conn(c, err ? strerror(err) : "socket error");
      continue;
    }
    if (evs[i].events & EPOLLOUT) {
      if (c->state == ST_CONNECTING) c->state = ST_HANDSHAKE;
      flush_writes(c);
    }
    if (c->state != ST_CLOSED && (evs[i].events & (EPOLLIN | EPOLLHUP))) on_readable(c);
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: wsload [options] --sub-url ws://HOST:PORT/PATH | --sub-urls FILE\n"
          "  -n N               subscribers (with --sub-url; default 10)\n"
          "  --sub-urls FILE    one subscriber URL per line (N = lines)\n"
          "  --pub-url URL      publisher URL (default: the first subscriber URL)\n"
          "  -m M               messages to publish (default 1000; 0 = only connect)\n"
          "  -s S               payload bytes (>= 36, default 64)\n"
          "  --rate R           messages/s (default 0 = as fast as the window allows)\n"
          "  --window W         max messages in flight, not yet seen by all (default 64)\n"
          "  --template T       publisher frame text, %%s = payload (default %%s)\n"
          "  --protocol P       Sec-WebSocket-Protocol\n"
          "  -H 'Name: value'   extra request header (repeatable)\n"
          "  --ready-first      wait until every subscriber got one message before publishing\n"
          "  --settle SEC       pause after all are connected (default 0.2)\n"
          "  --timeout SEC      give up on the run after SEC (default 20)\n"
          "  --hold SEC         with -m 0: keep the connections idle for SEC then exit\n"
          "  --server-pid PID[,PID...] report the server's CPU time from /proc/PID/stat (summed over several)\n"
          "  --label L          name printed in the result line\n");
  exit(2);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  const char *sub_url = NULL, *sub_file = NULL, *pub_url = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (usage(), ""))
    if (!strcmp(a, "-n")) opt.n_subs = atoi(ARG());
    else if (!strcmp(a, "--sub-url")) sub_url = ARG();
    else if (!strcmp(a, "--sub-urls")) sub_file = ARG();
    else if (!strcmp(a, "--pub-url")) pub_url = ARG();
    else if (!strcmp(a, "-m")) opt.m_msgs = atoll(ARG());
    else if (!strcmp(a, "-s")) opt.size = atoi(ARG());
    else if (!strcmp(a, "--rate")) opt.rate = atof(ARG());
    else if (!strcmp(a, "--window")) opt.window = atoi(ARG());
    else if (!strcmp(a, "--template")) opt.tmpl = ARG();
    else if (!strcmp(a, "--protocol")) opt.protocol = ARG();
    else if (!strcmp(a, "-H")) {
      if (opt.n_headers == MAX_HEADERS) die("too many headers");
      opt.headers[opt.n_headers++] = ARG();
    } else if (!strcmp(a, "--ready-first")) opt.ready_first = 1;
    else if (!strcmp(a, "--settle")) opt.settle = atof(ARG());
    else if (!strcmp(a, "--timeout")) opt.timeout = atof(ARG());
    else if (!strcmp(a, "--hold")) opt.hold = atof(ARG());
    else if (!strcmp(a, "--server-pid")) {
      char *list = ARG();
      for (char *pid = strtok(list, ","); pid && opt.server_pid_count < 8; pid = strtok(NULL, ","))
        opt.server_pids[opt.server_pid_count++] = atoi(pid);
    }
    else if (!strcmp(a, "--label")) opt.label = ARG();
    else usage();
  }
  if (!sub_url && !sub_file) usage();
  if (opt.size < HDR_LEN) die("-s must be at least %d", HDR_LEN);
  if (opt.window < 1) opt.window = 1;
  signal(SIGPIPE, SIG_IGN);

  char **urls = NULL;
  int n_urls = 0;
  if (sub_file) {
    FILE *f = fopen(sub_file, "r");
    if (!f) die("cannot open %s", sub_file);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\r\n")] = 0;
      if (!*line) continue;
      urls = realloc(urls, sizeof *urls * (size_t)(n_urls + 1));
      urls[n_urls++] = strdup(line);
    }
    fclose(f);
    opt.n_subs = n_urls;
  }
  if (opt.n_subs < 1) die("no subscribers");
  if (!pub_url) pub_url = sub_file ? urls[0] : sub_url;

  const char *pct = strstr(opt.tmpl, "%s");
  if (!pct) die("--template needs %%s");
  prefix_len = (size_t)(pct - opt.tmpl);
  prefix = strndup(opt.tmpl, prefix_len);
  suffix = strdup(pct + 2);
  suffix_len = strlen(suffix);

  ep = epoll_create1(EPOLL_CLOEXEC);
  subs = calloc((size_t)opt.n_subs, sizeof *subs);
  for (int i = 0; i < opt.n_subs; i++) {
    subs[i].idx = i;
    subs[i].state = ST_CLOSED;
    parse_url(sub_file ? urls[i] : sub_url, &subs[i].url_host, &subs[i].url_port, &subs[i].url_path);
  }
  lat_cap = opt.m_msgs * opt.n_subs;
  lat_us = malloc(sizeof *lat_us * (size_t)(lat_cap ? lat_cap : 1));

  /* connect, at most max_connecting handshakes at a time */
  uint64_t t_conn = now_ns();
  int next = 0;
  while (n_open < opt.n_subs) {
    while (next < opt.n_subs && n_connecting < opt.max_connecting) {
      start_connect(&subs[next++]);
      n_connecting++;
    }
    pump(50);
    for (int i = 0; i < next; i++)
      if (subs[i].state == ST_CLOSED) die("subscriber %d failed to connect", i);
    if ((now_ns() - t_conn) / 1e9 > opt.timeout) die("timed out connecting (%d of %d open)", n_open, opt.n_subs);
  }
  double conn_s = (now_ns() - t_conn) / 1e9;
  if (opt.m_msgs == 0) {
    printf("wsload connected %d in %.2f s\n", n_open, conn_s);
    fflush(stdout);
    uint64_t until = now_ns() + (uint64_t)(opt.hold * 1e9);
    while (now_ns() < until) pump(100);
    int still = 0;
    for (int i = 0; i < opt.n_subs; i++) still += subs[i].state == ST_OPEN;
    printf("wsload still-open %d\n", still);
    return still == opt.n_subs ? 0 : 1;
  }
  pub.idx = -1;
  pub.state = ST_CLOSED;
  parse_url(pub_url, &pub.url_host, &pub.url_port, &pub.url_path);
  start_connect(&pub);
  n_connecting++;
  while (pub.state != ST_OPEN) {
    pump(50);
    if (pub.state == ST_CLOSED) die("publisher failed to connect");
    if ((now_ns() - t_conn) / 1e9 > opt.timeout) die("timed out connecting the publisher");
  }
  if (opt.ready_first) {
    for (;;) {
      int ready = 0;
      for (int i = 0; i < opt.n_subs; i++) ready += subs[i].ready;
      if (ready == opt.n_subs) break;
      pump(20);
      if ((now_ns() - t_conn) / 1e9 > opt.timeout) die("timed out waiting for first messages (%d ready)", ready);
    }
  }
  {
    uint64_t until = now_ns() + (uint64_t)(opt.settle * 1e9);
    while (now_ns() < until) pump(10);
  }
  for (int i = 0; i < opt.n_subs; i++) subs[i].fragments_ignored = subs[i].messages = 0;

  /* publish */
  char *payload = malloc((size_t)opt.size + 1);
  memset(payload, 'x', (size_t)opt.size);
  double cpu0 = self_cpu_s(), scpu0 = servers_cpu_s(opt.server_pids, opt.server_pid_count);
  uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)(opt.timeout * 1e9), t_end = 0;
  long long window_stalls = 0;
  for (;;) {
    uint64_t t = now_ns();
    /* slowest subscriber still open */
    long long min_next = -1;
    int open_subs = 0;
    for (int i = 0; i < opt.n_subs; i++) {
      if (subs[i].state != ST_OPEN) continue;
      open_subs++;
      if (min_next < 0 || subs[i].next_seq < min_next) min_next = subs[i].next_seq;
    }
    if (open_subs == 0) {
      fprintf(stderr, "wsload: every subscriber is closed\n");
      break;
    }
    if (min_next >= opt.m_msgs) {
      t_end = t;
      break;
    }
    if (t > deadline) break;
    int wait_ms = 100;
    if (pub.state == ST_OPEN && sent_count < opt.m_msgs) {
      long long due = opt.rate > 0 ? (long long)((t - t0) / 1e9 * opt.rate) + 1 : opt.m_msgs;
      if (due > opt.m_msgs) due = opt.m_msgs;
      long long allowed = min_next + opt.window;
      if (due > allowed) {
        if (opt.rate > 0 && sent_count < due) window_stalls++;
        due = allowed;
      }
      while (sent_count < due && pub.wlen - pub.woff < 1 << 20) {
        uint64_t ts = now_ns();
        char hdr[64];
        snprintf(hdr, sizeof hdr, "#WSL%010lld:%020llu:", sent_count, (unsigned long long)ts);
        memcpy(payload, hdr, HDR_LEN);
        size_t flen = prefix_len + (size_t)opt.size + suffix_len;
        char *frame = malloc(flen);
        memcpy(frame, prefix, prefix_len);
        memcpy(frame + prefix_len, payload, (size_t)opt.size);
        memcpy(frame + prefix_len + opt.size, suffix, suffix_len);
        send_frame(&pub, 0x1, frame, flen);
        free(frame);
        sent_count++;
      }
      flush_writes(&pub);
      if (opt.rate > 0 && sent_count < opt.m_msgs) {
        double next_due = (double)sent_count / opt.rate * 1e9; /* ns after t0 */
        double ms = (next_due - (double)(now_ns() - t0)) / 1e6;
        wait_ms = ms <= 0 ? 0 : (int)ms + 1; /* round up: never spin; sends are stamped when they go */
      }
    }
    pump(wait_ms);
  }
  if (!t_end) t_end = now_ns();
  double cpu1 = self_cpu_s(), scpu1 = servers_cpu_s(opt.server_pids, opt.server_pid_count);
  double el = (t_end - t0) / 1e9;

  long long received = 0, lost = 0, dup = 0, missing = 0, frags = 0, closed = 0;
  for (int i = 0; i < opt.n_subs; i++) {
    received += subs[i].received;
    lost += subs[i].lost;
    dup += subs[i].dup;
    frags += subs[i].fragments_ignored;
    missing += opt.m_msgs - subs[i].next_seq; /* never arrived at the tail */
    closed += subs[i].state != ST_OPEN;
  }
  qsort(lat_us, (size_t)n_lat, sizeof *lat_us, cmp_u32);
#define PCT(p) (n_lat ? lat_us[(size_t)((p) * (n_lat - 1))] / 1000.0 : -1)
  double p50 = PCT(0.50), p90 = PCT(0.90), p99 = PCT(0.99), pmax = n_lat ? lat_us[n_lat - 1] / 1000.0 : -1;
  double self_cpu = cpu1 - cpu0, server_cpu = scpu0 >= 0 && scpu1 >= 0 ? scpu1 - scpu0 : -1;
  printf("wsload label=%s subs=%d msgs=%lld size=%d rate=%g window=%d connect_s=%.3f\n", opt.label, opt.n_subs,
         opt.m_msgs, opt.size, opt.rate, opt.window, conn_s);
  printf("RESULT label=%s elapsed_s=%.3f sent=%lld delivered=%lld deliveries_per_s=%.0f msgs_per_s=%.0f "
         "p50_ms=%.3f p90_ms=%.3f p99_ms=%.3f max_ms=%.3f lost=%lld missing=%lld dup=%lld fragments=%lld "
         "closed=%lld window_stalls=%lld load_cpu_s=%.3f server_cpu_s=%.3f load_vs_server_cpu=%.2f "
         "server_us_per_delivery=%.2f complete=%s\n",
         opt.label, el, sent_count, received, received / el, (double)received / opt.n_subs / el, p50, p90, p99, pmax,
         lost, missing, dup, frags, closed, window_stalls, self_cpu, server_cpu,
         server_cpu > 0 ? self_cpu / server_cpu : -1, server_cpu > 0 && received ? server_cpu / received * 1e6 : -1,
         (lost == 0 && missing == 0 && dup == 0) ? "yes" : "no");
  return (lost == 0 && missing == 0 && dup == 0) ? 0 : 1;
}
