/* util.h — small helpers shared by the generator and the runtime: warnings, clocks,
 * whole-file reads with a size bound, directory creation, and atomic file writes
 * (temp file in the same directory + rename, so no reader ever sees a torn file).
 */
#ifndef QGEN_UTIL_H
#define QGEN_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Print "qgen: warning: ..." to stderr (unless QGEN_QUIET is set in the environment). */
void qgen_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic clock in milliseconds. */
double qgen_now_ms(void);

/* Read a whole file into a fresh NUL-terminated malloc buffer. Fails (returns NULL,
   message in err) on a missing file, a read error, or a file larger than max_bytes. */
char *qgen_read_file(const char *path, size_t max_bytes, size_t *size, char *err, size_t errlen);

/* mkdir -p. Returns 0 on success (or when it exists as a directory), -1 otherwise. */
int qgen_mkdir_p(const char *path, int mode);

/* What a file of this st_mode is, for messages: "a regular file", "a FIFO", ... */
const char *qgen_file_kind(unsigned mode);

/* Whether a file can be made at path: its directory exists and is writable. Returns 0, or
   -1 with errno set and "PATH: cannot write: DIR: reason" in err. */
int qgen_dir_writable(const char *path, char *err, size_t errlen);

/* Whether qgen_write_atomic may write path: it does not exist or is a regular file (never a
   directory, device, FIFO, socket or symbolic link: the rename would replace the node, not
   write through it), and its directory is writable. Returns 0, or -1 with errno set and
   "PATH: ..." in err. */
int qgen_write_check(const char *path, char *err, size_t errlen);

/* Write data to path atomically: qgen_write_check, a unique temp file next to it
   ("PATH.tmp.<pid>.<n>.<ns>", which nothing reads: a killed writer leaves only that), fsync,
   rename. Returns 0, or -1 with errno set and "PATH: ..." in err (the temp file is
   removed). */
int qgen_write_atomic(const char *path, const void *data, size_t size, char *err, size_t errlen);

/* snprintf into a fixed buffer that never overflows; returns buf. */
char *qgen_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
