/* testlib.h — the tests' one assertion (header-only, one copy per test program): check()
 * prints "ok   message" or "FAIL message" and counts; each test ends by printing
 * "N passed, N failed" from the two counters and exits 1 if any check failed. */
#ifndef QGEN_TEST_CHECK_H
#define QGEN_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int passed, failed;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  if (ok) passed++;
  else failed++;
}

#endif
