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

/* Write data to path atomically: a unique temp file next to it, fsync, rename.
   Returns 0, or -1 with errno set (the temp file is removed). */
int qgen_write_atomic(const char *path, const void *data, size_t size);

/* snprintf into a fixed buffer that never overflows; returns buf. */
char *qgen_fmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
