/* test_gpu.c — the GPU decode path of every spec in specs/ and tests/gpu/ against the CPU
 * reference (qgen check, see harness/check.h), plus the > 4 GiB sequence on qwen3-4b. Exits 77
 * (ctest SKIP) when there is no GPU or driver. QGEN_CHECK_QUICK=1 keeps contexts small and
 * skips the big sequence (for compute-sanitizer runs); argv[1] may name one spec file.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/check.h"
#include "base/util.h"

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int lua_file(const struct dirent *d) {
  size_t n = strlen(d->d_name);
  return n > 4 && strcmp(d->d_name + n - 4, ".lua") == 0;
}

int main(int argc, char **argv) {
  qgen_check_opts o = {0};
  o.quick = getenv("QGEN_CHECK_QUICK") != NULL;
  o.seed = getenv("QGEN_SEED") ? strtoull(getenv("QGEN_SEED"), NULL, 0) : (unsigned long long)qgen_now_ms();
  printf("seed %llu%s\n", o.seed, o.quick ? " (quick)" : "");
  if (argc > 1) {
    int r = qgen_check_spec(argv[1], &o);
    return r == 77 ? 77 : r != 0;
  }
  static const char *const dirs[] = {QGEN_SOURCE_DIR "/specs", QGEN_SOURCE_DIR "/tests/gpu"};
  int failed = 0, ran = 0;
  for (int di = 0; di < 2; di++) {
    struct dirent **ents;
    int n = scandir(dirs[di], &ents, lua_file, by_name);
    if (n <= 0) {
      fprintf(stderr, "no specs in %s\n", dirs[di]);
      return 1;
    }
    for (int i = 0; i < n; i++) {
      char path[4096];
      qgen_fmt(path, sizeof path, "%s/%s", dirs[di], ents[i]->d_name);
      qgen_check_opts so = o;
      so.big = !o.quick && strcmp(ents[i]->d_name, "qwen3-4b.lua") == 0;
      so.variant = so.big ? "qwen3-4b" : NULL;
      int r = qgen_check_spec(path, &so);
      if (so.big && r == 0) { /* the other variants of the file, without the big sequence */
        so.big = 0;
        so.variant = NULL;
        r = qgen_check_spec(path, &so);
      }
      if (r == 77) { /* no GPU: free the listing (LeakSanitizer builds check) and skip */
        for (int k = i; k < n; k++) free(ents[k]);
        free(ents);
        return 77;
      }
      failed += r != 0;
      ran++;
      free(ents[i]);
    }
    free(ents);
  }
  printf("%d passed, %d failed\n", ran - failed, failed);
  return failed != 0;
}
