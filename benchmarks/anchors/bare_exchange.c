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
 *
 * Diagnostic knobs, all off by default (the default is the reference the
 * orchestrator uses): --bufsize B sets SO_SNDBUF/SO_RCVBUF, --two-sockets uses
 * one socketpair per direction, --recv-ring B receives into a reused B-byte
 * window (cache-resident, as a ring all_reduce's reduce-scatter scratch is)
 * instead of the cold 64 MiB buffer.
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
static size_t ring = 0; /* --recv-ring: receive into a reused window of this many bytes (cache-resident) */

static double exchange(int sfd, int rfd, const char *sbuf, char *rbuf, size_t size, size_t chunk) {
    size_t sent = 0, got = 0;
    double t0 = now();
    while (sent < size || got < size) {
        struct pollfd q[2] = {{rfd, 0, 0}, {sfd, 0, 0}};
        if (got < size) q[0].events = POLLIN;
        if (sent < size) q[1].events = POLLOUT;
        int r = poll(q, 2, 30000);
        if (r < 0) { if (errno == EINTR) continue; die("poll"); }
        if (r == 0) { fprintf(stderr, "exchange timed out\n"); exit(3); }
        short rev = q[0].revents | q[1].revents;
        /* POLLHUP alone is fine: the peer may be done and gone with our last bytes still queued */
        if (rev & (POLLERR | POLLNVAL)) { fprintf(stderr, "socket error\n"); exit(2); }
        if ((q[0].revents & POLLHUP) && !(q[0].revents & POLLIN) && got < size) { fprintf(stderr, "peer closed\n"); exit(2); }
        /* alternate one chunk each way until both would block, then poll again */
        int rd = (q[0].revents & POLLIN) != 0, wr = (q[1].revents & POLLOUT) != 0;
        while ((rd && got < size) || (wr && sent < size)) {
            if (rd && got < size) {
                size_t want = size - got < chunk ? size - got : chunk;
                char *dst = rbuf + got;
                if (ring) {
                    size_t off = got % ring;
                    if (want > ring - off) want = ring - off;
                    dst = rbuf + off;
                }
                ssize_t k = read(rfd, dst, want);
                if (k > 0) got += (size_t)k;
                else if (k == 0) { fprintf(stderr, "peer closed\n"); exit(2); }
                else if (errno == EAGAIN) rd = 0;
                else if (errno != EINTR) die("read");
            }
            if (wr && sent < size) {
                size_t want = size - sent < chunk ? size - sent : chunk;
                ssize_t k = write(sfd, sbuf + sent, want);
                if (k > 0) sent += (size_t)k;
                else if (errno == EAGAIN) wr = 0;
                else if (errno != EINTR) die("write");
            }
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
    int repeats = 9, bufsize = 0, two = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc) size = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bufsize") && i + 1 < argc) bufsize = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--recv-ring") && i + 1 < argc) ring = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--two-sockets")) two = 1;
        else { fprintf(stderr, "usage: %s [--size BYTES] [--chunk BYTES] [--repeats N] [--bufsize BYTES] [--recv-ring BYTES] [--two-sockets]\n", argv[0]); return 2; }
    }
    if (repeats < 1 || repeats > 1000 || chunk == 0 || size == 0) { fprintf(stderr, "bad arguments\n"); return 2; }

    /* sv: control + (default) both directions; with --two-sockets, tv carries child->parent data */
    int sv[2], tv[2] = {-1, -1};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) die("socketpair");
    if (two && socketpair(AF_UNIX, SOCK_STREAM, 0, tv) < 0) die("socketpair");
    if (bufsize > 0)
        for (int i = 0; i < 4; i++) {
            int s_ = i < 2 ? sv[i] : tv[i - 2];
            if (s_ < 0) continue;
            setsockopt(s_, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
            setsockopt(s_, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
        }
    pid_t pid = fork();
    if (pid < 0) die("fork");
    int child = pid == 0;
    int fd = sv[child ? 1 : 0];
    close(sv[child ? 0 : 1]);
    int fd2 = fd;
    if (two) {
        fd2 = tv[child ? 1 : 0];
        close(tv[child ? 0 : 1]);
    }
    /* parent sends on fd and receives on fd2; the child the other way round */
    int sfd = child ? fd2 : fd, rfd = child ? fd : fd2;

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
        if (rep == 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
            fcntl(fd2, F_SETFL, fcntl(fd2, F_GETFL) | O_NONBLOCK);
        }
        t[rep] = exchange(sfd, rfd, sbuf, rbuf, size, chunk);
        if (rbuf[0] != (child ? 1 : 2) || (!ring && rbuf[size - 1] != (child ? 1 : 2))) { fprintf(stderr, "bad data\n"); return 4; }
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
