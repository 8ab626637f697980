/* A TCP relay that holds every chunk it forwards for a fixed delay in each direction: the
 * benchmark's stand-in for `tc qdisc ... netem delay` on kernels built without sch_netem.
 *
 *   delay_relay LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_US
 *
 * Each direction of each connection has a reader thread (stamps a chunk with now + DELAY_US)
 * and a writer thread (sleeps until the stamp on CLOCK_MONOTONIC, then sends): chunks in
 * flight overlap, so pipelined or concurrent traffic is delayed, not serialised, as on a link
 * with that latency. Prints "ready" once listening. Ends on SIGTERM.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

struct chunk {
    struct chunk *next;
    struct timespec due;
    ssize_t len; /* 0: the sender closed its side */
    char data[];
};

struct conn {
    atomic_int refs; /* four threads */
    int fds[2];      /* client, server */
};

struct pipe_dir {
    struct conn *conn;
    int src, dst;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    struct chunk *head, *tail;
    atomic_int refs; /* reader and writer */
};

static long delay_ns;

static void release(struct conn *c) {
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        close(c->fds[0]);
        close(c->fds[1]);
        free(c);
    }
}

static void release_dir(struct pipe_dir *p) {
    struct conn *c = p->conn;
    if (atomic_fetch_sub(&p->refs, 1) == 1) {
        while (p->head) {
            struct chunk *n = p->head->next;
            free(p->head);
            p->head = n;
        }
        free(p);
    }
    release(c);
}

static void push(struct pipe_dir *p, struct chunk *ch) {
    pthread_mutex_lock(&p->lock);
    ch->next = NULL;
    if (p->tail)
        p->tail->next = ch;
    else
        p->head = ch;
    p->tail = ch;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->lock);
}

static void *reader(void *arg) {
    struct pipe_dir *p = arg;
    for (;;) {
        struct chunk *ch = malloc(sizeof *ch + CHUNK);
        if (!ch)
            abort();
        ssize_t n = read(p->src, ch->data, CHUNK);
        if (n < 0 && errno == EINTR) {
            free(ch);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &ch->due);
        ch->due.tv_nsec += delay_ns;
        ch->due.tv_sec += ch->due.tv_nsec / 1000000000L;
        ch->due.tv_nsec %= 1000000000L;
        ch->len = n > 0 ? n : 0;
        push(p, ch);
        if (n <= 0)
            break;
    }
    release_dir(p);
    return NULL;
}

static void *writer(void *arg) {
    struct pipe_dir *p = arg;
    int failed = 0;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (!p->head)
            pthread_cond_wait(&p->ready, &p->lock);
        struct chunk *ch = p->head;
        p->head = ch->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ch->due, NULL) == EINTR) {
        }
        ssize_t len = ch->len, off = 0;
        while (!failed && off < len) {
            ssize_t w = write(p->dst, ch->data + off, (size_t)(len - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                failed = 1;
            else
                off += w;
        }
        free(ch);
        if (len == 0 || failed) {
            shutdown(p->dst, SHUT_WR);
            if (failed)
                shutdown(p->src, SHUT_RD); /* wakes the reader: it ends this direction */
            if (len == 0)
                break;
        }
    }
    release_dir(p);
    return NULL;
}

static int tcp_nodelay(int fd) {
    int one = 1;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void start_dir(struct conn *c, int src, int dst) {
    struct pipe_dir *p = calloc(1, sizeof *p);
    pthread_t t;
    if (!p)
        abort();
    p->conn = c;
    p->src = src;
    p->dst = dst;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->ready, NULL);
    atomic_init(&p->refs, 2);
    if (pthread_create(&t, NULL, reader, p) || pthread_detach(t))
        abort();
    if (pthread_create(&t, NULL, writer, p) || pthread_detach(t))
        abort();
}

static int address(const char *host, const char *port, struct sockaddr_in *out) {
    memset(out, 0, sizeof *out);
    out->sin_family = AF_INET;
    out->sin_port = htons((unsigned short)atoi(port));
    return inet_pton(AF_INET, host, &out->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    struct sockaddr_in listen_at, target;
    if (argc != 6 || address(argv[1], argv[2], &listen_at) || address(argv[3], argv[4], &target)) {
        fprintf(stderr, "usage: %s LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_US\n",
                argv[0]);
        return 2;
    }
    delay_ns = atol(argv[5]) * 1000L;
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&listen_at, sizeof listen_at) || listen(lfd, 128)) {
        perror("listen");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        int cfd = accept(lfd, NULL, NULL);
        if (cfd < 0) {
            if (errno == EINTR)
                continue;
            perror("accept");
            return 1;
        }
        int sfd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(sfd, (struct sockaddr *)&target, sizeof target)) {
            perror("connect");
            close(cfd);
            close(sfd);
            continue;
        }
        tcp_nodelay(cfd);
        tcp_nodelay(sfd);
        struct conn *c = calloc(1, sizeof *c);
        if (!c)
            abort();
        c->fds[0] = cfd;
        c->fds[1] = sfd;
        atomic_init(&c->refs, 4);
        start_dir(c, cfd, sfd);
        start_dir(c, sfd, cfd);
    }
}
