/* util.c — see util.h. */
#define _GNU_SOURCE
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void qgen_warn(const char *fmt, ...) {
  if (getenv("QGEN_QUIET")) return;
  va_list ap;
  va_start(ap, fmt);
  fputs("qgen: warning: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

double qgen_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

char *qgen_fmt(char *buf, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, n, fmt, ap);
  va_end(ap);
  return buf;
}

char *qgen_read_file(const char *path, size_t max_bytes, size_t *size, char *err, size_t errlen) {
  /* O_NONBLOCK: opening a FIFO nobody writes must not hang (it then reads as empty); the
     reads themselves block, so a pipe with a writer (a shell's <(...)) is read whole */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    qgen_fmt(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    qgen_fmt(err, errlen, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
    close(fd);
    return NULL;
  }
  int fl = fcntl(fd, F_GETFL);
  FILE *f = fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
  if (!f) {
    qgen_fmt(err, errlen, "%s: cannot read: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    if (n == cap) {
      if (cap > max_bytes) break;
      cap *= 2;
      char *nb = realloc(buf, cap + 1);
      if (!nb) { free(buf); buf = NULL; break; }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  int rerr = ferror(f);
  fclose(f);
  if (!buf) {
    qgen_fmt(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  if (rerr) {
    qgen_fmt(err, errlen, "%s: read error", path);
    free(buf);
    return NULL;
  }
  if (n > max_bytes) {
    qgen_fmt(err, errlen, "%s: larger than %zu bytes", path, max_bytes);
    free(buf);
    return NULL;
  }
  buf[n] = 0;
  if (size) *size = n;
  return buf;
}

int qgen_mkdir_p(const char *path, int mode) {
  char tmp[4096];
  size_t len = strlen(path);
  if (len == 0 || len >= sizeof tmp) { errno = ENAMETOOLONG; return -1; }
  memcpy(tmp, path, len + 1);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
  struct stat st;
  if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
  return 0;
}

const char *qgen_file_kind(unsigned mode) {
  return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" : S_ISLNK(mode) ? "a symbolic link"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

int qgen_dir_writable(const char *path, char *err, size_t errlen) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) qgen_fmt(dir, sizeof dir, ".");
  else qgen_fmt(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (access(dir, W_OK | X_OK) != 0) {
    qgen_fmt(err, errlen, "%s: cannot write: %s: %s", path, dir, strerror(errno));
    return -1;
  }
  return 0;
}

int qgen_write_check(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      /* a rename would replace the node itself (a device, a FIFO, the link rather than
         what it points to): refuse instead */
      qgen_fmt(err, errlen, "%s: not replaced: it is %s (qgen writes only regular files)", path,
               qgen_file_kind(st.st_mode));
      errno = S_ISDIR(st.st_mode) ? EISDIR : EEXIST;
      return -1;
    }
  } else if (errno != ENOENT) {
    qgen_fmt(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return -1;
  }
  return qgen_dir_writable(path, err, errlen);
}

int qgen_write_atomic(const char *path, const void *data, size_t size, char *err, size_t errlen) {
  if (qgen_write_check(path, err, errlen) != 0) return -1;
  char tmp[4200];
  static unsigned counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u.%ld", path, (long)getpid(),
           __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED), (long)ts.tv_nsec);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) goto fail;
  const char *p = data;
  size_t left = size;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      goto fail;
    }
    p += w;
    left -= (size_t)w;
  }
  if (fsync(fd) != 0) goto fail;
  if (close(fd) != 0) { fd = -1; goto fail; }
  fd = -1;
  /* the check above again, as late as possible: the target may have changed meanwhile */
  if (qgen_write_check(path, err, errlen) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  if (rename(tmp, path) != 0) goto fail;
  return 0;
fail: {
  int e = errno;
  if (fd >= 0) close(fd);
  unlink(tmp);
  qgen_fmt(err, errlen, "%s: cannot write: %s", path, strerror(e));
  errno = e;
  return -1;
}
}
