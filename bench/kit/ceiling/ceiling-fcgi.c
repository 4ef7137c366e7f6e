/* The FastCGI ceiling: the least any HTTP-to-FastCGI gateway does per request, so the floor
 * under every server's cost in the `php` scenario (compare.py's "ceiling-fcgi" target).
 *
 * One thread, epoll, nothing parsed that need not be. A client's request is found by scanning
 * for the blank line that ends its head (the benchmark sends bodiless GETs, so there is nothing
 * else to look for), and every request becomes the same FastCGI request, built once at start:
 * BEGIN_REQUEST with FCGI_KEEP_CONN, PARAMS naming the one script (SCRIPT_FILENAME from argv,
 * REQUEST_METHOD and the few other variables php-fpm wants), the empty PARAMS and the empty
 * STDIN, sent in one write. The connections to php-fpm are a pool of at most CONNS (argv; give
 * php-fpm's children, so that no connection ever waits in php-fpm's backlog), opened when first
 * needed and kept; a request that finds none free waits here, in order, for the next whose
 * exchange ends — no connect, no close, no process handed over per request. php-fpm's records
 * are read until END_REQUEST; the STDOUT bytes after the CGI head's blank line are the body,
 * sent with a status line and Content-Length in one write. Per request that is a read and a
 * write on each socket and a share of epoll_wait: what relaying between two sockets costs on
 * this kernel without batching syscalls, whatever the server's language.
 *
 * Not a gateway to use: every request runs the one script, the CGI head's Status and fields are
 * dropped, a partial write is finished by spinning (the messages are small), and errors close
 * the connection.
 *
 *   cc -O2 -o ceiling-fcgi ceiling-fcgi.c
 *   taskset -c 0 ./ceiling-fcgi 8093 /run/php/php-fpm.sock /var/www/hello.php 16
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_FD (1 << 16)
#define CLIENT_BUF 4096
#define FPM_BUF 65536

enum { NONE, CLIENT, FPM };

struct conn {
    int kind;
    unsigned gen;  /* bumped when the descriptor closes, so a queued or answered client that
                      left is told from a new one on the same number */
    char *buf;     /* what was read and not yet used */
    size_t len;
    /* a client: requests read and not yet answered, and whether one of them is with php-fpm or
       in the queue (then nothing more is done for it until it is answered) */
    int pending, waiting;
    /* a php-fpm connection: the client its request is for (-1 when free) and that client's gen;
       the STDOUT read so far */
    int client;
    unsigned client_gen;
    char *out;
    size_t out_len;
};

static struct conn conns[MAX_FD];
static int ep;
static struct sockaddr_un fpm_addr;
static char fcgi_request[4096];
static size_t fcgi_request_len;
static int max_fpm, open_fpm;
static int free_fpm[MAX_FD], n_free;
/* the clients waiting for a php-fpm connection, in order: (fd, gen) */
static int queue_fd[MAX_FD];
static unsigned queue_gen[MAX_FD];
static unsigned q_head, q_tail;

static void put_param(char **p, const char *name, const char *value) {
    size_t n = strlen(name), v = strlen(value);
    /* lengths below 128 take one byte; the paths here may not */
    if (n > 127) {
        *(*p)++ = (char)(0x80 | (n >> 24)); *(*p)++ = (char)(n >> 16); *(*p)++ = (char)(n >> 8);
    }
    *(*p)++ = (char)n;
    if (v > 127) {
        *(*p)++ = (char)(0x80 | (v >> 24)); *(*p)++ = (char)(v >> 16); *(*p)++ = (char)(v >> 8);
    }
    *(*p)++ = (char)v;
    memcpy(*p, name, n);
    *p += n;
    memcpy(*p, value, v);
    *p += v;
}

static char *record(char *p, int type, size_t len) {
    unsigned char h[8] = {1, (unsigned char)type, 0, 1, (unsigned char)(len >> 8), (unsigned char)len, 0, 0};
    memcpy(p, h, 8);
    return p + 8;
}

/* The one FastCGI request every HTTP request becomes. */
static void build_request(const char *script) {
    char params[2048], *q = params;
    const char *slash = strrchr(script, '/');
    char root[1024], name[1024];
    snprintf(root, sizeof root, "%.*s", (int)(slash ? slash - script : 0), script);
    snprintf(name, sizeof name, "%s", slash ? slash : script);
    put_param(&q, "SCRIPT_FILENAME", script);
    put_param(&q, "SCRIPT_NAME", name);
    put_param(&q, "DOCUMENT_ROOT", root);
    put_param(&q, "REQUEST_URI", name);
    put_param(&q, "QUERY_STRING", "");
    put_param(&q, "REQUEST_METHOD", "GET");
    put_param(&q, "SERVER_PROTOCOL", "HTTP/1.1");
    put_param(&q, "GATEWAY_INTERFACE", "CGI/1.1");
    size_t plen = q - params;
    char *p = fcgi_request;
    unsigned char begin[8] = {0, 1, 1 /* FCGI_KEEP_CONN */, 0, 0, 0, 0, 0};
    p = record(p, 1 /* BEGIN_REQUEST */, 8);
    memcpy(p, begin, 8);
    p += 8;
    p = record(p, 4 /* PARAMS */, plen);
    memcpy(p, params, plen);
    p += plen;
    p = record(p, 4, 0);
    p = record(p, 5 /* STDIN */, 0);
    fcgi_request_len = p - fcgi_request;
}

static void send_all(int fd, const char *b, size_t n) {
    for (size_t at = 0; at < n;) {
        ssize_t w = send(fd, b + at, n - at, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) at += w;
        else if (w < 0 && errno != EAGAIN) return;
    }
}

static void watch(int fd) {
    struct epoll_event e = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

static void close_conn(int fd) {
    struct conn *c = &conns[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    free(c->buf);
    free(c->out);
    if (c->kind == FPM) open_fpm--;
    unsigned gen = c->gen + 1;
    memset(c, 0, sizeof *c);
    c->gen = gen;
}

static int fpm_connect(void) {
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0) return -1;
    if (s >= MAX_FD || connect(s, (struct sockaddr *)&fpm_addr, sizeof fpm_addr)) {
        close(s);
        return -1;
    }
    struct conn *c = &conns[s];
    c->kind = FPM;
    c->buf = malloc(FPM_BUF);
    c->out = malloc(FPM_BUF);
    c->client = -1;
    open_fpm++;
    watch(s);
    return s;
}

/* Sends the client's next request on a php-fpm connection: a free one, a new one while fewer
 * than max_fpm are open, else the client waits in the queue. */
static void dispatch(int client) {
    struct conn *c = &conns[client];
    c->waiting = 1;
    int f = -1;
    if (n_free) f = free_fpm[--n_free];
    else if (open_fpm < max_fpm) f = fpm_connect();
    if (f < 0) {
        queue_fd[q_tail % MAX_FD] = client;
        queue_gen[q_tail % MAX_FD] = c->gen;
        q_tail++;
        return;
    }
    conns[f].client = client;
    conns[f].client_gen = c->gen;
    conns[f].out_len = 0;
    send_all(f, fcgi_request, fcgi_request_len);
}

/* A php-fpm connection's exchange ended: the next queued client that is still there takes it. */
static void release(int f) {
    conns[f].client = -1;
    while (q_head != q_tail) {
        int client = queue_fd[q_head % MAX_FD];
        unsigned gen = queue_gen[q_head % MAX_FD];
        q_head++;
        if (conns[client].kind == CLIENT && conns[client].gen == gen) {
            conns[f].client = client;
            conns[f].client_gen = gen;
            conns[f].out_len = 0;
            send_all(f, fcgi_request, fcgi_request_len);
            return;
        }
    }
    free_fpm[n_free++] = f;
}

static void answer(int client, const char *stdout_bytes, size_t n) {
    static char resp[FPM_BUF + 128];
    const char *blank = memmem(stdout_bytes, n, "\r\n\r\n", 4);
    const char *body = blank ? blank + 4 : stdout_bytes + n;
    size_t body_len = stdout_bytes + n - body;
    int h = snprintf(resp, 128, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n\r\n", body_len);
    memcpy(resp + h, body, body_len);
    send_all(client, resp, h + body_len);
    struct conn *c = &conns[client];
    c->waiting = 0;
    if (--c->pending > 0) dispatch(client);
}

static void client_readable(int fd) {
    struct conn *c = &conns[fd];
    ssize_t got = recv(fd, c->buf + c->len, CLIENT_BUF - c->len, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN)) {
        close_conn(fd);
        return;
    }
    if (got < 0) return;
    c->len += got;
    /* every blank line is the end of a request's head */
    char *at = c->buf, *end = c->buf + c->len, *blank;
    while ((blank = memmem(at, end - at, "\r\n\r\n", 4))) {
        c->pending++;
        at = blank + 4;
    }
    c->len = end - at;
    memmove(c->buf, at, c->len);
    if (c->len == CLIENT_BUF) {
        close_conn(fd);
        return;
    }
    if (c->pending && !c->waiting) dispatch(fd);
}

static void fpm_readable(int fd) {
    struct conn *c = &conns[fd];
    ssize_t got = recv(fd, c->buf + c->len, FPM_BUF - c->len, MSG_DONTWAIT);
    if (got < 0 && errno == EAGAIN) return;
    if (got <= 0 || c->client < 0) {
        /* php-fpm went away (or spoke out of turn): the request in flight is lost with it */
        int client = c->client;
        unsigned gen = c->client_gen;
        close_conn(fd);
        if (client >= 0 && conns[client].kind == CLIENT && conns[client].gen == gen) close_conn(client);
        return;
    }
    c->len += got;
    unsigned char *p = (unsigned char *)c->buf, *end = p + c->len;
    while (end - p >= 8) {
        size_t content = (size_t)p[4] << 8 | p[5], total = 8 + content + p[6];
        if ((size_t)(end - p) < total) break;
        if (p[1] == 6 /* STDOUT */) {
            if (c->out_len + content > FPM_BUF) {
                fprintf(stderr, "response larger than %d bytes\n", FPM_BUF);
                exit(1);
            }
            memcpy(c->out + c->out_len, p + 8, content);
            c->out_len += content;
        } else if (p[1] == 3 /* END_REQUEST */) {
            int client = c->client;
            if (conns[client].kind == CLIENT && conns[client].gen == c->client_gen)
                answer(client, c->out, c->out_len);
            p += total;
            /* nothing follows an END_REQUEST on this connection until the next request */
            c->len = 0;
            release(fd);
            return;
        }
        p += total;
    }
    c->len = end - p;
    memmove(c->buf, p, c->len);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PORT PHP_FPM_SOCKET SCRIPT_FILENAME [CONNS]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    fpm_addr.sun_family = AF_UNIX;
    snprintf(fpm_addr.sun_path, sizeof fpm_addr.sun_path, "%s", argv[2]);
    build_request(argv[3]);
    max_fpm = argc > 4 ? atoi(argv[4]) : 16;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) {
        perror("listen");
        return 1;
    }
    ep = epoll_create1(0);
    watch(ls);
    struct epoll_event evs[512];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAX_FD) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conns[c].kind = CLIENT;
                    conns[c].buf = malloc(CLIENT_BUF);
                    watch(c);
                }
            } else if (conns[fd].kind == CLIENT) {
                client_readable(fd);
            } else if (conns[fd].kind == FPM) {
                fpm_readable(fd);
            }
        }
    }
}
