/*
 rendezvous.h: rank 0 hands a small blob (NCCL's 128-byte unique id) to the other processes of a
 run started without MPI: through a shared file system (-pi fs -pf DIR) or over TCP (-pi tcp
 -ps HOST[:PORT]). Both give up after timeout_s with a one-line fatal error naming the flag, so a
 missing rank 0 never hangs the others.

   rendezvous_fs(dir, rank, size, blob, len, timeout_s);    rank 0 writes, the others read
   rendezvous_fs_done(dir, rank);                           rank 0 removes the file once every
                                                            rank has joined (no stale ids)
   rendezvous_tcp(addr, rank, size, blob, len, timeout_s);  rank 0 listens, the others connect

 The fs file is DIR/leanstep_rendezvous.bin, written atomically (checkpoint.h's temp + rename),
 so a reader never sees half of it. A file left by a crashed run is removed by rank 0 before it
 writes, but a fast rank could read it first: the communicator's init then fails or times out
 (--comm-timeout) with that hint. TCP: rank 0 binds PORT (default 12345) on every interface and
 sends the blob to each of the size-1 connections; the others retry connecting until the timeout.
*/
#ifndef LLMC_RENDEZVOUS_H
#define LLMC_RENDEZVOUS_H

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>
#include "llmc/utils.h"

#define RENDEZVOUS_DEFAULT_PORT 12345

static inline double rendezvous_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void rendezvous_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static inline void rendezvous_fs_path(const char* dir, char* path, size_t len) {
    snprintf(path, len, "%s/leanstep_rendezvous.bin", dir);
}

static inline void rendezvous_fs(const char* dir, int rank, int size, void* blob, size_t len, double timeout_s) {
    (void)size;
    char path[1100];
    rendezvous_fs_path(dir, path, sizeof(path));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) { ls_fatal("flag -pf: '%s' is not a directory (a shared one that every rank sees)", dir); }
    if (rank == 0) {
        remove(path);  // a crashed run's file
        AtomicFile af;
        atomic_file_open(&af, path);
        if (fwrite(blob, 1, len, af.fp) != len) { ls_fatal("flag -pf: cannot write '%s': %s", path, strerror(errno)); }
        atomic_file_commit(&af);
        return;
    }
    double t0 = rendezvous_now();
    for (;;) {
        FILE* fp = fopen(path, "rb");
        if (fp) {
            size_t got = fread(blob, 1, len, fp);
            fclose(fp);
            if (got == len) { return; }
        }
        if (rendezvous_now() - t0 > timeout_s) {
            ls_fatal("flag -pf: rank %d waited %.0f s for rank 0's file '%s' (is rank 0 running, and is -pf the same shared "
                     "directory on every node?)", rank, timeout_s, path);
        }
        rendezvous_sleep_ms(100);
    }
}

static inline void rendezvous_fs_done(const char* dir, int rank) {
    if (rank != 0) { return; }
    char path[1100];
    rendezvous_fs_path(dir, path, sizeof(path));
    remove(path);
}

// "HOST[:PORT]" -> host (in buf) and port string.
static inline void rendezvous_split_addr(const char* addr, char* host, size_t hlen, char* port, size_t plen) {
    const char* colon = strrchr(addr, ':');
    size_t n = colon ? (size_t)(colon - addr) : strlen(addr);
    if (n == 0 || n >= hlen || (colon && (colon[1] == '\0' || strlen(colon + 1) >= plen))) {
        ls_fatal("flag -ps: '%s' is not HOST[:PORT]", addr);
    }
    memcpy(host, addr, n);
    host[n] = '\0';
    if (colon) { snprintf(port, plen, "%s", colon + 1); } else { snprintf(port, plen, "%d", RENDEZVOUS_DEFAULT_PORT); }
    char* end = NULL;
    long p = strtol(port, &end, 10);
    if (end == port || *end != '\0' || p < 1 || p > 65535) { ls_fatal("flag -ps: '%s': the port must be 1 .. 65535", addr); }
}

// Sends or receives exactly len bytes, waiting at most until the deadline; 0 on failure.
static inline int rendezvous_io(int fd, void* buf, size_t len, int sending, double deadline) {
    char* p = (char*)buf;
    size_t done = 0;
    while (done < len) {
        struct pollfd pf = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
        int ms = (int)((deadline - rendezvous_now()) * 1000.0);
        if (ms <= 0 || poll(&pf, 1, ms) <= 0) { return 0; }
        ssize_t k = sending ? send(fd, p + done, len - done, MSG_NOSIGNAL) : recv(fd, p + done, len - done, 0);
        if (k <= 0) { return 0; }
        done += (size_t)k;
    }
    return 1;
}

static inline void rendezvous_tcp(const char* addr, int rank, int size, void* blob, size_t len, double timeout_s) {
    char host[256], port[16];
    rendezvous_split_addr(addr, host, sizeof(host), port, sizeof(port));
    double deadline = rendezvous_now() + timeout_s;
    if (rank == 0) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        sa.sin_port = htons((uint16_t)strtol(port, NULL, 10));  // checked by rendezvous_split_addr
        if (fd < 0 || bind(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 || listen(fd, size) != 0) {
            ls_fatal("flag -ps: rank 0 cannot listen on port %s: %s", port, strerror(errno));
        }
        for (int joined = 1; joined < size; joined++) {
            struct pollfd pf = {fd, POLLIN, 0};
            int ms = (int)((deadline - rendezvous_now()) * 1000.0);
            int c = (ms > 0 && poll(&pf, 1, ms) > 0) ? accept(fd, NULL, NULL) : -1;
            if (c < 0 || !rendezvous_io(c, blob, len, 1, deadline)) {
                ls_fatal("flag -ps: rank 0 got %d of %d ranks on port %s within %.0f s (are the others running with -ps pointing "
                         "at this host?)", joined, size, port, timeout_s);
            }
            close(c);
        }
        close(fd);
        return;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) { ls_fatal("flag -ps: cannot resolve '%s': %s", host, gai_strerror(rc)); }
    for (;;) {  // rank 0 may not listen yet: retry until the deadline
        int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
        if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            int ok = rendezvous_io(fd, blob, len, 0, deadline);
            close(fd);
            if (ok) { break; }
        } else if (fd >= 0) {
            close(fd);
        }
        if (rendezvous_now() > deadline) {
            freeaddrinfo(res);
            ls_fatal("flag -ps: rank %d could not get the id from rank 0 at %s:%s within %.0f s", rank, host, port, timeout_s);
        }
        rendezvous_sleep_ms(100);
    }
    freeaddrinfo(res);
}

#endif // LLMC_RENDEZVOUS_H
