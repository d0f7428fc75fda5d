/* The ceiling for a 2-rank ring all_reduce on one host: two processes joined by
 * a Unix socketpair each send SIZE bytes to the other, full duplex, with
 * non-blocking sockets and a poll loop moving chunks of CHUNK bytes. This is
 * the data volume a 2-rank ring moves (reduce-scatter + all-gather: n/2 twice,
 * each way). Prints one JSON line with the median over REPEATS of the slower
 * side's time.
 *
 *   gcc -O2 -o bare_exchange bare_exchange.c
 *   ./bare_exchange [--size BYTES] [--chunk BYTES] [--repeats N]
 *   (defaults: 64 MiB, 256 KiB, 9)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

/* blocking helpers for the small control messages */
static void write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t k = write(fd, p, len);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct pollfd q = {fd, POLLOUT, 0}; poll(&q, 1, 10000); continue; }
            die("write");
        }
        p += k; len -= (size_t)k;
    }
}

static void read_all(int fd, void *buf, size_t len) {
    char *p = buf;
    while (len) {
        ssize_t k = read(fd, p, len);
        if (k == 0) { fprintf(stderr, "peer closed\n"); exit(2); }
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct pollfd q = {fd, POLLIN, 0}; poll(&q, 1, 10000); continue; }
            die("read");
        }
        p += k; len -= (size_t)k;
    }
}

/* Send sbuf and receive into rbuf at the same time; returns seconds. */
static double exchange(int fd, const char *sbuf, char *rbuf, size_t size, size_t chunk) {
    size_t sent = 0, got = 0;
    double t0 = now();
    while (sent < size || got < size) {
        struct pollfd q = {fd, 0, 0};
        if (sent < size) q.events |= POLLOUT;
        if (got < size) q.events |= POLLIN;
        int r = poll(&q, 1, 30000);
        if (r < 0) { if (errno == EINTR) continue; die("poll"); }
        if (r == 0) { fprintf(stderr, "exchange timed out\n"); exit(3); }
        /* POLLHUP alone is fine: the peer may be done and gone with our last bytes still queued */
        if (q.revents & (POLLERR | POLLNVAL)) { fprintf(stderr, "socket error\n"); exit(2); }
        if ((q.revents & POLLHUP) && !(q.revents & POLLIN) && got < size) { fprintf(stderr, "peer closed\n"); exit(2); }
        if ((q.revents & POLLIN) && got < size) {
            size_t want = size - got < chunk ? size - got : chunk;
            ssize_t k = read(fd, rbuf + got, want);
            if (k > 0) got += (size_t)k;
            else if (k == 0) { fprintf(stderr, "peer closed\n"); exit(2); }
            else if (errno != EAGAIN && errno != EINTR) die("read");
        }
        if ((q.revents & POLLOUT) && sent < size) {
            size_t want = size - sent < chunk ? size - sent : chunk;
            ssize_t k = write(fd, sbuf + sent, want);
            if (k > 0) sent += (size_t)k;
            else if (k < 0 && errno != EAGAIN && errno != EINTR) die("write");
        }
    }
    return now() - t0;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t size = (size_t)64 << 20, chunk = (size_t)256 << 10;
    int repeats = 9;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--size BYTES] [--chunk BYTES] [--repeats N]\n", argv[0]); return 2; }
    }
    if (repeats < 1 || repeats > 1000 || chunk == 0 || size == 0) { fprintf(stderr, "bad arguments\n"); return 2; }

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) die("socketpair");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    int child = pid == 0;
    int fd = sv[child ? 1 : 0];
    close(sv[child ? 0 : 1]);

    char *sbuf = malloc(size), *rbuf = malloc(size);
    if (!sbuf || !rbuf) die("malloc");
    memset(sbuf, child ? 2 : 1, size);  /* touch every page before timing */
    memset(rbuf, 0, size);
    double *t = calloc((size_t)repeats + 1, sizeof(double));

    for (int rep = 0; rep <= repeats; rep++) {   /* repeat 0 is a warm-up */
        char token = 's';
        /* line both sides up: a 1-byte round trip */
        if (child) { read_all(fd, &token, 1); write_all(fd, &token, 1); }
        else { write_all(fd, &token, 1); read_all(fd, &token, 1); }
        if (rep == 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
        t[rep] = exchange(fd, sbuf, rbuf, size, chunk);
        if (rbuf[0] != (child ? 1 : 2) || rbuf[size - 1] != (child ? 1 : 2)) { fprintf(stderr, "bad data\n"); return 4; }
    }
    if (child) {
        write_all(fd, t, sizeof(double) * ((size_t)repeats + 1));
        _exit(0);
    }
    double *tc = calloc((size_t)repeats + 1, sizeof(double));
    read_all(fd, tc, sizeof(double) * ((size_t)repeats + 1));
    int status = 0;
    waitpid(pid, &status, 0);
    double *m = calloc((size_t)repeats, sizeof(double));
    for (int i = 0; i < repeats; i++) m[i] = t[i + 1] > tc[i + 1] ? t[i + 1] : tc[i + 1];
    qsort(m, (size_t)repeats, sizeof(double), cmp);
    double med = repeats % 2 ? m[repeats / 2] : 0.5 * (m[repeats / 2 - 1] + m[repeats / 2]);
    /* algbw: bytes each side sent / time; the two directions together move twice that */
    printf("{\"impl\": \"bare\", \"op\": \"exchange\", \"n\": 2, \"nbytes\": %zu, \"us\": %.3f, "
           "\"algbw\": %.6f, \"busbw\": %.6f, \"iters\": %d, \"min_us\": %.3f, \"chunk\": %zu, "
           "\"stat\": \"median of the slower side\"}\n",
           size, med * 1e6, size / med / 1e9, size / med / 1e9, repeats, m[0] * 1e6, chunk);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
