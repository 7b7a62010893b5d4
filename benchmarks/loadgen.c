/* loadgen.c: the compiled beanstalk load generator behind `beanstalk_load.py --client c`.
 * One process drives N connections to 127.0.0.1:PORT from T threads (default: half the CPUs,
 * the rest is the server's); connection i belongs to thread i % T, a thread with several
 * connections waits on its own epoll set, a thread with one uses a blocking recv. Workloads,
 * modes and latency definitions are those of bench_client.py (benchmarks/README.md);
 * unpipelined is a batch of 1. Every connection connects, sets up its tube and (reserve-delete)
 * fills it with pipelined puts, all threads meet at a barrier, the program prints "started",
 * runs for --duration seconds or --jobs jobs per connection and prints one JSON line. Any
 * unexpected reply stops the run: {"ok": false, "error": ...}, exit status 1.
 * Build: cc -O2 -pthread -o loadgen loadgen.c   (POSIX + Linux epoll, no other libraries)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_SIZE 100
#define SUB_BITS 7          /* histogram: 128 sub-buckets per power of two, < 1% error */
#define HBUCKETS 4096
#define MAX_CONNS 4096

enum { OP_PUT, OP_RESERVE, OP_DELETE };
enum { W_PUT, W_RD, W_PRD };
static const char *WORKLOADS[] = {"put", "reserve-delete", "put-reserve-delete"};
static const char *OPS[] = {"put", "reserve", "delete"};

static struct {
    int port, conns, threads, workload, pipelined, batch, shared;
    long jobs, prefill;
    double duration, prefill_timeout, io_timeout;
    const char *tube;
} O = {0, 1, 0, W_PUT, 1, 100, 0, -1, 0, 3.0, 90.0, 30.0, "bench"};

struct conn {
    int fd, idx, op, k, got, nids, timed_out, done, drained;
    long jobs, limit, avail;
    char *rb, *wb;                   /* replies received; the next delete batch */
    size_t rlen, rpos, rcap, wlen;
    uint64_t t_op, t_cycle;
};

struct thr {
    pthread_t th;
    int ep, n, active, w, pipe, record;
    struct conn **c;
    uint64_t deadline, t0, t1, nsamp, maxns, hist[HBUCKETS];
};

static char *put_buf, *res_buf;
static size_t put_len, res_len;
static pthread_barrier_t barrier;
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static char err_msg[512];
static atomic_int failed;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(struct conn *c, const char *fmt, ...) {   /* the first error wins; always -1 */
    va_list ap;
    pthread_mutex_lock(&err_lock);
    if (!err_msg[0]) {
        int n = snprintf(err_msg, sizeof err_msg, "conn %d: ", c->idx);
        va_start(ap, fmt);
        vsnprintf(err_msg + n, sizeof err_msg - (size_t)n, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&err_lock);
    atomic_store(&failed, 1);
    return -1;
}
#define ERRNO_FAIL(c, what) fail(c, "%s: %s", what, strerror(errno))

static int bad_reply(struct conn *c, const char *p, size_t len) {
    return fail(c, "%s: unexpected reply '%.*s'", OPS[c->op], (int)(len > 120 ? 120 : len), p);
}

/* --- latency histogram ---------------------------------------------------------------- */
static unsigned hidx(uint64_t v) {
    if (v < (1u << SUB_BITS)) return (unsigned)v;
    unsigned e = 63 - __builtin_clzll(v) - SUB_BITS + 1;     /* (v >> e) is in [64, 128) */
    unsigned i = (e << (SUB_BITS - 1)) + (unsigned)(v >> e);
    return i < HBUCKETS ? i : HBUCKETS - 1;
}

static uint64_t hmid(unsigned i) {                          /* middle of bucket i */
    if (i < (1u << SUB_BITS)) return i;
    unsigned e = (i >> (SUB_BITS - 1)) - 1;
    uint64_t m = i - ((uint64_t)e << (SUB_BITS - 1));
    return (m << e) + ((1ull << e) >> 1);
}

static void sample(struct thr *t, uint64_t ns) {
    t->hist[hidx(ns)]++, t->nsamp++, t->maxns = ns > t->maxns ? ns : t->maxns;
}

static uint64_t percentile(const uint64_t *h, uint64_t n, unsigned q, uint64_t max) {
    uint64_t rank = (q * n + 99) / 100, cum = 0;                  /* nearest rank */
    if (rank < 1) rank = 1;
    for (unsigned i = 0; i < HBUCKETS; i++)
        if ((cum += h[i]) >= rank) return hmid(i) < max ? hmid(i) : max;
    return max;
}

/* --- sending and receiving ------------------------------------------------------------- */
static int send_all(struct conn *c, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL);
        if (k >= 0) p += k, n -= (size_t)k;
        else if (errno != EINTR)
            return errno == EAGAIN ? fail(c, "send timed out") : ERRNO_FAIL(c, "send");
    }
    return 0;
}

static int recv_some(struct conn *c, int flags) {          /* 1 got bytes, 0 nothing yet, -1 */
    if (c->rlen == c->rcap) return fail(c, "%s: reply too large", OPS[c->op]);
    ssize_t n = recv(c->fd, c->rb + c->rlen, c->rcap - c->rlen, flags);
    if (n > 0) { c->rlen += (size_t)n; return 1; }
    if (n == 0) return fail(c, "server closed the connection");
    if (errno == EINTR || (flags && errno == EAGAIN)) return 0;
    return errno == EAGAIN ? fail(c, "timed out waiting for the server") : ERRNO_FAIL(c, "recv");
}

/* Set-up: send `verb arg`, wait for the one-line reply, which must start with want. */
static int command(struct conn *c, const char *verb, const char *arg, const char *want) {
    char cmd[300], *nl;
    int n = snprintf(cmd, sizeof cmd, "%s %s\r\n", verb, arg);
    c->rlen = 0;
    if (send_all(c, cmd, (size_t)n)) return -1;
    while (!(nl = memchr(c->rb, '\n', c->rlen)))
        if (recv_some(c, 0) < 0) return -1;
    size_t len = (size_t)(nl - c->rb) - (nl > c->rb && nl[-1] == '\r');
    if (len < strlen(want) || memcmp(c->rb, want, strlen(want)))
        return fail(c, "%s: unexpected reply '%.*s'", verb, (int)(len > 120 ? 120 : len), c->rb);
    c->rlen = 0;
    return 0;
}

/* --- the workload state machine ---------------------------------------------------------- */
static int start_op(struct conn *c, int op, int k) {
    c->op = op; c->k = k; c->got = 0; c->t_op = now_ns();
    if (op == OP_PUT) return send_all(c, put_buf, (size_t)k * put_len);
    if (op == OP_DELETE) return send_all(c, c->wb, c->wlen);
    c->nids = 0; c->timed_out = 0; c->wlen = 0;
    return send_all(c, res_buf, (size_t)k * res_len);
}

static void finish(struct thr *t, struct conn *c, int drained) {
    c->done = 1, c->drained = drained, t->active--;
}

static void start_cycle(struct thr *t, struct conn *c) {
    if (c->jobs >= c->limit || now_ns() >= t->deadline) { finish(t, c, 0); return; }
    long k = t->pipe ? O.batch : 1;
    if (k > c->limit - c->jobs) k = c->limit - c->jobs;
    if (t->w == W_RD && !O.shared && k > c->avail - c->jobs) k = c->avail - c->jobs;
    if (k <= 0) { finish(t, c, 1); return; }      /* own tube emptied: drained early */
    c->t_cycle = now_ns();
    start_op(c, t->w == W_RD ? OP_RESERVE : OP_PUT, (int)k);
}

/* Parse replies from rpos; 1 when all k replies of the op are in, 0 for more bytes, -1. */
static int parse(struct conn *c) {
    while (c->got < c->k) {
        char *p = c->rb + c->rpos, *end = c->rb + c->rlen;
        char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) return 0;
        size_t len = (size_t)(nl - p), adv = len + 1;
        if (len && p[len - 1] == '\r') len--;
        else return bad_reply(c, p, len);
        if (c->op == OP_PUT) {
            if (len < 10 || memcmp(p, "INSERTED ", 9)) return bad_reply(c, p, len);
        } else if (c->op == OP_DELETE) {
            if (len != 7 || memcmp(p, "DELETED", 7)) return bad_reply(c, p, len);
        } else if (len == 9 && !memcmp(p, "TIMED_OUT", 9)) {
            c->timed_out++;
        } else if (len > 9 && !memcmp(p, "RESERVED ", 9)) {
            char *id = p + 9, *sp = memchr(id, ' ', len - 9), *num_end;
            if (!sp || sp == id || sp - id > 20) return bad_reply(c, p, len);
            unsigned long bytes = strtoul(sp + 1, &num_end, 10);
            if (num_end != p + len) return bad_reply(c, p, len);
            if (bytes > c->rcap || (adv += bytes + 2) > c->rcap)
                return fail(c, "reserve: job body of %lu bytes too large", bytes);
            if ((size_t)(end - p) < adv) return 0;
            if (memcmp(p + adv - 2, "\r\n", 2)) return fail(c, "reserve: body without CRLF");
            c->wlen += (size_t)sprintf(c->wb + c->wlen, "delete %.*s\r\n", (int)(sp - id), id);
            c->nids++;
        } else {
            return bad_reply(c, p, len);
        }
        c->rpos += adv;
        c->got++;
    }
    return 1;
}

/* All replies of the current op are in: record, move to the next op or the next cycle. */
static void op_done(struct thr *t, struct conn *c) {
    uint64_t now = now_ns();
    if (c->rpos != c->rlen)
        return (void)fail(c, "%s: %zu unexpected trailing bytes", OPS[c->op], c->rlen - c->rpos);
    c->rpos = c->rlen = 0;
    if (!t->pipe && t->record && !(c->op == OP_RESERVE && c->timed_out)) sample(t, now - c->t_op);
    if (c->op == OP_PUT) {
        if (t->w != W_PUT) { start_op(c, OP_RESERVE, c->k); return; }
        c->jobs += c->k;
    } else if (c->op == OP_RESERVE) {
        if (c->timed_out && t->w == W_PRD)
            return (void)fail(c, "reserve timed out %dx right after put", c->timed_out);
        if (c->nids) start_op(c, OP_DELETE, c->nids);
        else finish(t, c, 1);                    /* tube empty: drained early */
        return;
    } else {
        c->jobs += c->nids;
        if (c->timed_out) { finish(t, c, 1); return; }   /* partial last batch: no sample */
    }
    if (t->pipe && t->record) sample(t, now - c->t_cycle);
    start_cycle(t, c);
}

static void on_readable(struct thr *t, struct conn *c, int flags) {
    int r = recv_some(c, flags);
    if (r > 0 && (r = parse(c)) > 0) op_done(t, c);
}

/* Run a workload on every connection of the thread until each is finished. */
static void run(struct thr *t, int w, int pipe, long limit, double secs, int record) {
    struct epoll_event ev[64];
    t->w = w; t->pipe = pipe; t->record = record; t->active = t->n;
    t->deadline = now_ns() + (uint64_t)(secs * 1e9);
    for (int i = 0; i < t->n && !atomic_load(&failed); i++) {
        t->c[i]->jobs = 0, t->c[i]->done = 0, t->c[i]->limit = limit;
        start_cycle(t, t->c[i]);
    }
    while (t->active > 0 && !atomic_load(&failed)) {
        if (t->n == 1) { on_readable(t, t->c[0], 0); continue; }
        int n = epoll_wait(t->ep, ev, 64, (int)(O.io_timeout * 1000));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {                     /* blame the first connection still waiting */
            struct conn *c = t->c[0];
            for (int i = t->n - 1; i >= 0; i--) c = t->c[i]->done ? c : t->c[i];
            if (n) ERRNO_FAIL(c, "epoll_wait");
            else fail(c, "timed out waiting for the server");
            return;
        }
        for (int i = 0; i < n; i++) {
            struct conn *c = ev[i].data.ptr;
            if (!c->done) on_readable(t, c, MSG_DONTWAIT);
        }
    }
}

/* Connect (blocking socket, TCP_NODELAY, kernel send/recv timeouts), use and watch the tube. */
static int setup(struct thr *t, struct conn *c) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)O.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {(time_t)O.io_timeout,
                         (suseconds_t)((O.io_timeout - (double)(long)O.io_timeout) * 1e6)};
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    int one = 1;
    char tube[240], cmd[300];
    if ((c->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) return ERRNO_FAIL(c, "socket");
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a)) return ERRNO_FAIL(c, "connect");
    snprintf(tube, sizeof tube, O.shared ? "%s" : "%s-%d", O.tube, c->idx);
    snprintf(cmd, sizeof cmd, "USING %s", tube);
    if (command(c, "use", tube, cmd) || command(c, "watch", tube, "WATCHING ")
        || (strcmp(tube, "default") && command(c, "ignore", "default", "WATCHING 1")))
        return -1;
    if (t->n > 1 && epoll_ctl(t->ep, EPOLL_CTL_ADD, c->fd, &ev)) return ERRNO_FAIL(c, "epoll_ctl");
    return 0;
}

static void *thread_main(void *arg) {
    struct thr *t = arg;
    for (int i = 0; i < t->n && !atomic_load(&failed); i++) setup(t, t->c[i]);
    if (O.prefill > 0 && !atomic_load(&failed)) {      /* not timed: pipelined puts */
        run(t, W_PUT, 1, O.prefill, O.prefill_timeout, 0);
        for (int i = 0; i < t->n; i++) t->c[i]->avail = t->c[i]->jobs;
    }
    pthread_barrier_wait(&barrier);
    t->t0 = now_ns();
    if (!atomic_load(&failed))
        run(t, O.workload, O.pipelined, O.jobs > 0 ? O.jobs : 1L << 62, O.duration, 1);
    t->t1 = now_ns();
    return NULL;
}

static double cpu_seconds(void) {                   /* user + system, all threads */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec)
           + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void usage(const char *msg) {
    fprintf(stderr, "loadgen: %s\nusage: loadgen --port P [--conns N] [--threads T] [--workload "
            "put|reserve-delete|put-reserve-delete] [--unpipelined] [--batch B] [--duration S] "
            "[--jobs N] [--prefill N] [--prefill-timeout S] [--io-timeout S] [--tube PREFIX] "
            "[--shared-tube]\n", msg);
    exit(2);
}

static void parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--unpipelined")) { O.pipelined = 0; continue; }
        if (!strcmp(a, "--shared-tube")) { O.shared = 1; continue; }
        if (!v) usage("missing value");
        i++;
        if (!strcmp(a, "--port")) O.port = atoi(v);
        else if (!strcmp(a, "--conns")) O.conns = atoi(v);
        else if (!strcmp(a, "--threads")) O.threads = atoi(v);
        else if (!strcmp(a, "--batch")) O.batch = atoi(v);
        else if (!strcmp(a, "--duration")) O.duration = atof(v);
        else if (!strcmp(a, "--jobs")) O.jobs = atol(v);
        else if (!strcmp(a, "--prefill")) O.prefill = atol(v);
        else if (!strcmp(a, "--prefill-timeout")) O.prefill_timeout = atof(v);
        else if (!strcmp(a, "--io-timeout")) O.io_timeout = atof(v);
        else if (!strcmp(a, "--tube")) O.tube = v;
        else if (!strcmp(a, "--workload")) {
            O.workload = -1;
            for (int w = 0; w < 3; w++) if (!strcmp(v, WORKLOADS[w])) O.workload = w;
            if (O.workload < 0) usage("unknown workload");
        } else usage("unknown option");
    }
    if (O.port <= 0 || O.conns < 1 || O.conns > MAX_CONNS || O.batch < 1 || O.duration <= 0
        || O.io_timeout <= 0 || strlen(O.tube) > 200)
        usage("bad --port, --conns (1..4096), --batch, --duration, --io-timeout or --tube");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (O.threads <= 0) O.threads = ncpu > 1 ? (int)ncpu / 2 : 1;
    if (O.threads > O.conns) O.threads = O.conns;
}

/* The result line; the error is JSON-escaped (it may quote a server's reply). */
static int report(struct conn *conns, struct thr *thr, double cpu) {
    if (atomic_load(&failed)) {
        printf("{\"ok\": false, \"error\": \"");
        for (const char *e = err_msg; *e; e++)
            printf((unsigned char)*e < 0x20 || *e == '"' || *e == '\\' ? "\\u%04x" : "%c", *e);
        printf("\"}\n");
        return 1;
    }
    uint64_t t0 = UINT64_MAX, t1 = 0, n = 0, max = 0, *h = calloc(HBUCKETS, sizeof *h);
    long jobs = 0, prefilled = 0;
    int drained = 0;
    for (int j = 0; j < O.threads; j++) {
        t0 = thr[j].t0 < t0 ? thr[j].t0 : t0;
        t1 = thr[j].t1 > t1 ? thr[j].t1 : t1;
        max = thr[j].maxns > max ? thr[j].maxns : max;
        n += thr[j].nsamp;
        for (int b = 0; b < HBUCKETS; b++) h[b] += thr[j].hist[b];
    }
    for (int i = 0; i < O.conns; i++)
        jobs += conns[i].jobs, prefilled += conns[i].avail, drained |= conns[i].drained;
    printf("{\"ok\": true, \"workload\": \"%s\", \"mode\": \"%s\", \"connections\": %d, "
           "\"threads\": %d, \"jobs\": %ld, \"elapsed\": %.6f, \"cpu\": %.4f, "
           "\"prefilled\": %ld, \"drained\": %s, \"lat_ns\": {\"n\": %llu, \"p50\": %llu, "
           "\"p90\": %llu, \"p99\": %llu, \"max\": %llu}, \"conn_jobs\": [",
           WORKLOADS[O.workload], O.pipelined ? "pipelined" : "unpipelined", O.conns, O.threads,
           jobs, (double)(t1 - t0) / 1e9, cpu, prefilled, drained ? "true" : "false",
           (unsigned long long)n, (unsigned long long)percentile(h, n, 50, max),
           (unsigned long long)percentile(h, n, 90, max),
           (unsigned long long)percentile(h, n, 99, max), (unsigned long long)max);
    for (int i = 0; i < O.conns; i++) printf(i ? ", %ld" : "%ld", conns[i].jobs);
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    static const char res_one[] = "reserve-with-timeout 0\r\n";
    char put_one[64];
    int hl = sprintf(put_one, "put 1024 0 60 %d\r\n", BODY_SIZE);
    put_len = (size_t)hl + BODY_SIZE + 2;
    res_len = sizeof res_one - 1;
    put_buf = malloc(put_len * (size_t)O.batch);
    res_buf = malloc(res_len * (size_t)O.batch);
    for (int b = 0; b < O.batch; b++) {              /* the job body: "0123456789" repeated */
        char *p = put_buf + (size_t)b * put_len;
        memcpy(p, put_one, (size_t)hl);
        for (int j = 0; j < BODY_SIZE; j++) p[hl + j] = (char)('0' + j % 10);
        memcpy(p + hl + BODY_SIZE, "\r\n", 2);
        memcpy(res_buf + (size_t)b * res_len, res_one, res_len);
    }
    struct conn *conns = calloc((size_t)O.conns, sizeof *conns);
    struct thr *thr = calloc((size_t)O.threads, sizeof *thr);
    for (int i = 0; i < O.conns; i++) {
        struct conn *c = &conns[i];
        struct thr *t = &thr[i % O.threads];
        if (!t->c) t->c = calloc((size_t)O.conns, sizeof c), t->ep = epoll_create1(0);
        c->idx = i;
        c->rcap = (size_t)O.batch * (BODY_SIZE + 64) + 4096;
        c->rb = malloc(c->rcap);
        c->wb = malloc((size_t)O.batch * 32 + 64);
        t->c[t->n++] = c;
    }
    pthread_barrier_init(&barrier, NULL, (unsigned)O.threads + 1);
    for (int j = 0; j < O.threads; j++) pthread_create(&thr[j].th, NULL, thread_main, &thr[j]);
    pthread_barrier_wait(&barrier);
    double cpu0 = cpu_seconds();
    if (!atomic_load(&failed)) { printf("started\n"); fflush(stdout); }
    for (int j = 0; j < O.threads; j++) pthread_join(thr[j].th, NULL);
    return report(conns, thr, cpu_seconds() - cpu0);   /* the kernel closes the sockets */
}
