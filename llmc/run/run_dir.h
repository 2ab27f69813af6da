/*
 run_dir.h: the output directory of a run (-o): made when missing (with its parents), and owned by
 one run at a time.

 The owner holds an exclusive flock(2) on DIR/run.lock from start-up, before it writes anything in
 DIR, until it exits, and writes its pid and host name there. A second run into DIR stops at
 start-up with one line naming DIR and the owner. The kernel drops the lock with its process (exit,
 crash, SIGKILL), so a pid left in the file by a run that did not end normally is stale: the next
 run takes the lock over and says so. A run that ends normally empties the file; the file itself
 stays (removing it would let two runs lock two different files). With several processes, rank 0
 holds the lock for the run (llmc/run/run.h).
*/
#ifndef LLMC_RUN_DIR_H
#define LLMC_RUN_DIR_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "llmc/utils.h"

typedef struct {
    int fd;                 // DIR/run.lock while held, else -1
    char path[1200];
    char owner[160];        // what the file said: "pid 123 on host" (empty: nothing)
} RunDirLock;

// Makes dir and its missing parents (mkdir -p). Returns 0 and sets errno on failure.
static inline int run_dir_make(const char* dir) {
    char path[1200];
    size_t len = strlen(dir);
    if (len == 0 || len >= sizeof(path)) { errno = ENAMETOOLONG; return 0; }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0') { continue; }
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) { return 0; }
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) { return 0; }
    if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return 0; }
    return 1;
}

// Reads what the lock file says into l->owner (one line, at most its size).
static inline void run_dir_read_owner(RunDirLock* l) {
    l->owner[0] = '\0';
    ssize_t n = pread(l->fd, l->owner, sizeof(l->owner) - 1, 0);
    if (n <= 0) { return; }
    l->owner[n] = '\0';
    l->owner[strcspn(l->owner, "\n")] = '\0';
}

// Takes DIR/run.lock. Returns 1 when this process holds it (l->owner: a stale owner's line, or
// empty), 0 when another process holds it (l->owner: its line); exits with one line when the
// directory cannot be made or written.
static inline int run_dir_lock(RunDirLock* l, const char* dir) {
    l->fd = -1;
    if (!run_dir_make(dir)) { ls_fatal("flag -o: cannot make the output directory '%s': %s", dir, strerror(errno)); }
    snprintf(l->path, sizeof(l->path), "%s/run.lock", dir);
    int fd = open(l->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // (CLOEXEC: `make data` and co. do not inherit it)
    if (fd < 0) { ls_fatal("flag -o: cannot write in the output directory '%s' (%s): %s", dir, l->path, strerror(errno)); }
    l->fd = fd;
    int rc;
    while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
    run_dir_read_owner(l);
    if (rc != 0) {
        if (errno != EWOULDBLOCK) { ls_fatal("flag -o: cannot lock '%s': %s", l->path, strerror(errno)); }
        close(fd);
        l->fd = -1;
        return 0;
    }
    char host[64] = "?", line[160];
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    int n = snprintf(line, sizeof(line), "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        ls_fatal("flag -o: cannot write '%s': %s", l->path, strerror(errno));
    }
    return 1;
}

// A run that ends normally: the file no longer names it, then the lock goes.
static inline void run_dir_unlock(RunDirLock* l) {
    if (l->fd < 0) { return; }
    int rc = ftruncate(l->fd, 0);  // (failing, the pid stays: the next run calls it stale, nothing worse)
    (void)rc;
    close(l->fd);
    l->fd = -1;
}

#endif // LLMC_RUN_DIR_H
