/* The proxy ceiling: the cheapest thing that still forwards HTTP/1.1 keep-alive requests to an
 * upstream and their answers back.
 *
 * One thread, epoll, no parsing and no rewriting: each client connection gets its own upstream
 * connection when it is accepted (a perfect keep-alive pool: never a connect per request, never
 * a wait for a free connection), and bytes are copied blindly both ways — what a client sends
 * goes to its upstream, what the upstream sends goes to its client. Per request that is the
 * least any proxy does on this kernel without batching syscalls: a read and a write on each
 * side, and a share of epoll_wait. So its server-core µs per request is the floor for every
 * proxy measured beside it (the `proxy` scenarios' "ceiling-proxy" target), and a target below
 * a fraction of a peer's cost that this floor does not reach is not reachable by syscalls and
 * TCP as they are.
 *
 * Not a proxy to use: a partial write is finished by spinning (the messages are small and the
 * socket buffers empty, so it does not happen at these loads), and errors close both sides.
 *
 *   cc -O2 -o ceiling-proxy ceiling-proxy.c && taskset -c 0 ./ceiling-proxy 8088 8078
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD (1 << 16)
/* the other end of each descriptor: a client's upstream, an upstream's client */
static int peer[MAX_FD];

static int upstream_connect(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a)) {
        if (s >= 0) close(s);
        return -1;
    }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static void drop(int ep, int fd) {
    int other = peer[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL);
    close(fd);
    close(other);
}

int main(int argc, char **argv) {
    int port = argc > 1 ? atoi(argv[1]) : 8088;
    int up_port = argc > 2 ? atoi(argv[2]) : 8078;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) {
        perror("listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static char buf[65536];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    int u = upstream_connect(up_port);
                    if (c >= MAX_FD || u < 0 || u >= MAX_FD) {
                        close(c);
                        if (u >= 0) close(u);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    /* level-triggered: one read per readiness (MSG_DONTWAIT, for the
                     * upstream socket connected blocking) */
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                    struct epoll_event f = {.events = EPOLLIN, .data.fd = u};
                    epoll_ctl(ep, EPOLL_CTL_ADD, u, &f);
                    peer[c] = u;
                    peer[u] = c;
                }
                continue;
            }
            ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (got == 0 || (got < 0 && errno != EAGAIN)) {
                drop(ep, fd);
                continue;
            }
            for (ssize_t at = 0; got > 0 && at < got;) {
                ssize_t w = send(peer[fd], buf + at, got - at, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) at += w;
                else if (w < 0 && errno != EAGAIN) break;
            }
        }
    }
}
