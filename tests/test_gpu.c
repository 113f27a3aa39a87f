/* test_gpu.c — the GPU decode path of every spec in specs/ against the CPU reference
 * (qgen check, see gen/check.h). Exits 77 (ctest SKIP) when there is no GPU or driver.
 * QGEN_CHECK_QUICK=1 keeps contexts small (for compute-sanitizer runs); argv[1] may name
 * one spec file instead of all of them.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gen/check.h"
#include "../gen/util.h"

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
  struct dirent **ents;
  const char *dir = QGEN_SOURCE_DIR "/specs";
  int n = scandir(dir, &ents, lua_file, by_name), failed = 0, ran = 0;
  if (n <= 0) {
    fprintf(stderr, "no specs in %s\n", dir);
    return 1;
  }
  for (int i = 0; i < n; i++) {
    char path[4096];
    qgen_fmt(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
    int r = qgen_check_spec(path, &o);
    if (r == 77) return 77;
    failed += r != 0;
    ran++;
    free(ents[i]);
  }
  free(ents);
  printf("%d passed, %d failed\n", ran - failed, failed);
  return failed != 0;
}
