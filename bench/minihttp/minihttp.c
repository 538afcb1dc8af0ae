// Minimal HTTP/1.1 keep-alive responder: one thread, epoll, a fixed 200 body for every request (a machine baseline).
// bench/run.sh rest runs it beside meshgate with the same wrk settings: the p99 this machine allows any HTTP server.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
static const char RESP[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}";
struct conn { int fd; int state; };
int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8099;
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(ls, (void *)&a, sizeof a) || listen(ls, 1024)) { perror("bind"); return 1; }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  static int st[65536]; // per fd: how many of "\r\n\r\n" matched so far
  char buf[65536];
  printf("ready port=%d\n", port); fflush(stdout);
  for (;;) {
    struct epoll_event evs[256];
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == ls) {
        int c;
        while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
          setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          st[c] = 0;
          struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
          epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
        }
        continue;
      }
      ssize_t r = read(fd, buf, sizeof buf);
      if (r <= 0) { if (r < 0 && errno == EAGAIN) continue; close(fd); continue; }
      int replies = 0;
      const char *pat = "\r\n\r\n";
      for (ssize_t k = 0; k < r; k++) {
        if (buf[k] == pat[st[fd]]) { if (++st[fd] == 4) { replies++; st[fd] = 0; } }
        else st[fd] = buf[k] == '\r' ? 1 : 0;
      }
      for (int k = 0; k < replies; k++) if (write(fd, RESP, sizeof RESP - 1) < 0) break;
    }
  }
}
