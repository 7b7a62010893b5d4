/* nullserver.c: the `null-c` target, a canned-reply beanstalk server in C (the `null` target,
 * bench_servers.serve_null, is Python and slower than loadgen). It keeps no state: put ->
 * INSERTED 1000000, reserve* -> RESERVED 1000000 with a 100-byte body, delete -> DELETED,
 * use/watch/ignore -> USING/WATCHING, anything else -> UNKNOWN_COMMAND. One thread, epoll.
 * Usage: nullserver PORT (127.0.0.1; runs until killed). Build: cc -O2 -o nullserver nullserver.c
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BODY_SIZE 100
#define IN_CAP 65536

struct client { int fd; size_t len; char in[IN_CAP]; };

static char out[1 << 20];
static size_t olen;
static char reserved[64 + BODY_SIZE];
static size_t reserved_len;

static int flush_out(int fd) {
    for (size_t off = 0; off < olen;) {
        ssize_t k = send(fd, out + off, olen - off, MSG_NOSIGNAL);
        if (k < 0) return -1;
        off += (size_t)k;
    }
    olen = 0;
    return 0;
}

static void add(const char *p, size_t n) { memcpy(out + olen, p, n); olen += n; }
#define ADD(s) add(s, sizeof s - 1)

/* Answer every complete command in c->in; -1 to close the connection. */
static int serve(struct client *c) {
    char *p = c->in, *end = c->in + c->len, *nl;
    while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
        size_t len = (size_t)(nl - p) - (nl > p && nl[-1] == '\r'), adv = (size_t)(nl - p) + 1;
        if (olen > sizeof out - 1024 && flush_out(c->fd)) return -1;
        if (len > 4 && !memcmp(p, "put ", 4)) {
            char *sp = memrchr(p, ' ', len);
            adv += strtoul(sp + 1, NULL, 10) + 2;            /* the body and its CRLF */
            if ((size_t)(end - p) < adv) break;
            ADD("INSERTED 1000000\r\n");
        } else if (len >= 7 && !memcmp(p, "reserve", 7)) {
            add(reserved, reserved_len);
        } else if (len > 7 && !memcmp(p, "delete ", 7)) {
            ADD("DELETED\r\n");
        } else if (len > 4 && len < 250 && !memcmp(p, "use ", 4)) {
            ADD("USING ");
            add(p + 4, len - 4);
            ADD("\r\n");
        } else if (len > 6 && !memcmp(p, "watch ", 6)) {
            ADD("WATCHING 2\r\n");
        } else if (len > 7 && !memcmp(p, "ignore ", 7)) {
            ADD("WATCHING 1\r\n");
        } else if (len == 4 && !memcmp(p, "quit", 4)) {
            return -1;
        } else {
            ADD("UNKNOWN_COMMAND\r\n");
        }
        p += adv;
    }
    c->len = (size_t)(end - p);
    memmove(c->in, p, c->len);
    return flush_out(c->fd) || c->len == IN_CAP ? -1 : 0;
}

int main(int argc, char **argv) {
    int one = 1, ep = epoll_create1(0), ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((unsigned short)(argc > 1 ? atoi(argv[1]) : 0))};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[256];
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (argc != 2 || bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) {
        perror("nullserver PORT");
        return 2;
    }
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    reserved_len = (size_t)sprintf(reserved, "RESERVED 1000000 %d\r\n", BODY_SIZE);
    for (int j = 0; j < BODY_SIZE; j++) reserved[reserved_len++] = (char)('0' + j % 10);
    memcpy(reserved + reserved_len, "\r\n", 2);
    reserved_len += 2;
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            struct client *c = evs[i].data.ptr;
            if (!c) {                                        /* the listening socket */
                int fd = accept(ls, NULL, NULL);
                if (fd < 0 || !(c = malloc(sizeof *c))) continue;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                c->fd = fd, c->len = 0;
                struct epoll_event cev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                continue;
            }
            ssize_t k = recv(c->fd, c->in + c->len, IN_CAP - c->len, 0);
            if (k > 0) c->len += (size_t)k;
            if (k <= 0 || serve(c)) {
                olen = 0;
                close(c->fd);                                /* also leaves the epoll set */
                free(c);
            }
        }
    }
}
