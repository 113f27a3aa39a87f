/* test_sha256.c — SHA-256 against the FIPS 180-4 / NIST example vectors, padding
 * boundaries, and incremental updates split at every offset. */
#include "base/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"



static int digest_is(const uint8_t d[32], const char *want) {
  char hex[65];
  qgen_hex(d, 32, hex);
  if (strcmp(hex, want) == 0) return 1;
  printf("      got  %s\n      want %s\n", hex, want);
  return 0;
}

static const char MSG448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
static const char MSG896[] =
    "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
    "lmnopqrsmnopqrstnopqrstu";

/* Hash msg fed as two updates split at every offset, and byte by byte; all must equal
   the one-shot digest. */
static void check_splits(const uint8_t *msg, size_t n, const char *what) {
  uint8_t want[32], got[32];
  char line[128];
  qgen_sha256_buf(msg, n, want);
  int bad = 0;
  for (size_t cut = 0; cut <= n; cut++) {
    qgen_sha256 c;
    qgen_sha256_init(&c);
    qgen_sha256_update(&c, msg, cut);
    qgen_sha256_update(&c, NULL, 0);
    qgen_sha256_update(&c, msg + cut, n - cut);
    qgen_sha256_final(&c, got);
    if (memcmp(got, want, 32) != 0) bad++;
  }
  snprintf(line, sizeof line, "%s: two updates split at each of %zu offsets", what, n + 1);
  check(bad == 0, line);

  bad = 0;
  for (size_t a = 0; a <= n; a++) /* three pieces: every (a, b) pair */
    for (size_t b = a; b <= n; b++) {
      qgen_sha256 c;
      qgen_sha256_init(&c);
      qgen_sha256_update(&c, msg, a);
      qgen_sha256_update(&c, msg + a, b - a);
      qgen_sha256_update(&c, msg + b, n - b);
      qgen_sha256_final(&c, got);
      if (memcmp(got, want, 32) != 0) bad++;
    }
  snprintf(line, sizeof line, "%s: three updates at every pair of offsets", what);
  check(bad == 0, line);

  qgen_sha256 c;
  qgen_sha256_init(&c);
  for (size_t i = 0; i < n; i++) qgen_sha256_update(&c, msg + i, 1);
  qgen_sha256_final(&c, got);
  snprintf(line, sizeof line, "%s: byte-by-byte updates", what);
  check(memcmp(got, want, 32) == 0, line);
}

int main(void) {
  uint8_t d[32];

  /* FIPS 180-4 / NIST CSRC examples. */
  qgen_sha256_buf("", 0, d);
  check(digest_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        "empty message");
  qgen_sha256_buf(NULL, 0, d);
  check(digest_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        "empty message (NULL data)");
  qgen_sha256_buf("abc", 3, d);
  check(digest_is(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        "\"abc\"");
  qgen_sha256_buf(MSG448, strlen(MSG448), d);
  check(digest_is(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
        "448-bit message");
  qgen_sha256_buf(MSG896, strlen(MSG896), d);
  check(digest_is(d, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"),
        "896-bit message");

  /* One million 'a': one shot, and in uneven chunks. */
  size_t million = 1000000;
  char *a = malloc(million);
  if (!a) return 2;
  memset(a, 'a', million);
  qgen_sha256_buf(a, million, d);
  check(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        "one million 'a' (one update)");
  qgen_sha256 c;
  qgen_sha256_init(&c);
  for (size_t off = 0, step = 1; off < million; off += step, step = step * 7 % 1013 + 1)
    qgen_sha256_update(&c, a + off, off + step > million ? million - off : step);
  qgen_sha256_final(&c, d);
  check(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"),
        "one million 'a' (uneven chunks)");

  /* Padding boundaries: lengths around 55/56 (length field fits or spills) and 64. */
  static const struct { size_t n; const char *hex; } pad[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {57, "f13b2d724659eb3bf47f2dd6af1accc87b81f09f59f2b75e5c0bed6589dfe8c6"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (size_t i = 0; i < sizeof pad / sizeof pad[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "%zu x 'a' (padding boundary)", pad[i].n);
    qgen_sha256_buf(a, pad[i].n, d);
    check(digest_is(d, pad[i].hex), what);
  }

  /* Incremental updates split at every offset. */
  check_splits((const uint8_t *)MSG896, strlen(MSG896), "896-bit message");
  uint8_t mixed[200];
  for (size_t i = 0; i < sizeof mixed; i++) mixed[i] = (uint8_t)(i * 131 + 7);
  check_splits(mixed, sizeof mixed, "200 binary bytes");
  free(a);

  /* qgen_hex */
  static const uint8_t hb[] = {0x00, 0x0f, 0xa5, 0xff};
  char hx[9];
  memset(hx, 'x', sizeof hx);
  qgen_hex(hb, 4, hx);
  check(strcmp(hx, "000fa5ff") == 0, "qgen_hex lower-case and NUL-terminated");

  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
