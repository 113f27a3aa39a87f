/* cache.h — the on-disk store of compiled kernels (docs/DESIGN.md §5).
 *
 * Content-addressed: the caller hashes everything that determines the artifact (format
 * version, qgen version, emitted source, NVRTC version, arch, options) into a 32-byte key;
 * the file name adds a readable prefix: "<name>-<first 16 hex of key>.qgc".
 * The name is sanitized: bytes outside [A-Za-z0-9._-] become '_' (so no name can leave the
 * directory), it is cut to 100 bytes, and an empty or NULL name becomes "entry".
 * Directory: $QGEN_CACHE_DIR, else $XDG_CACHE_HOME/qgen, else $HOME/.cache/qgen (empty
 * variables count as unset; a relative XDG_CACHE_HOME is ignored, as the XDG spec says; a
 * relative QGEN_CACHE_DIR or dir is taken from the current directory when the cache opens).
 * QGEN_CACHE=off (or 0) disables the disk (memory only), even for an explicit dir; on or 1
 * (or unset) enables it; any other value is refused by the CLI and warned about here.
 *
 * Entry file: magic "QGENCACH", u32 format version (2), u32 flags (0), key[32], u64 payload
 * size, sha256(spec name slot + payload)[32], the name of the spec that wrote it (80 bytes,
 * NUL-padded), payload. Format 1 files (no spec name; the checksum over the payload alone)
 * are still read. A file that is short, long, of another version or key, or whose checksum
 * fails is a miss (and is replaced by the next put). Writes go to a temp
 * file in the same directory and are renamed into place, so concurrent processes never see
 * a torn entry (a killed writer leaves only its temp file, which clear removes once stale).
 * Every entry read or written in this process is also kept in memory.
 * The first failed write (a directory that cannot be made or written, a full disk) warns
 * once; the cache then keeps reading existing entries from the directory (an old entry
 * stays valid: the temp file is removed) and stores new ones in memory only.
 * Loading an entry runs its code, so, as ssh does with its keys, a directory that someone
 * besides its owner may write (group or others can write it, or another user than this
 * one or root owns it) is not used at all: the cache warns once (saying what to chmod)
 * and works from memory; an entry file such a user could have written is a miss, with one
 * warning, and the next put replaces it.
 * One qgen_cache may be shared by threads (a mutex guards its memory store).
 */
#ifndef QGEN_CACHE_H
#define QGEN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define QGEN_CACHE_FORMAT 2
#define QGEN_CACHE_MAX_ENTRY (512u << 20) /* larger files are treated as corrupt */

typedef struct qgen_cache qgen_cache;

/* Open the cache at dir (NULL = resolve from the environment as above). Never fails for
   an unusable directory: it warns once and works from memory. NULL only on OOM. */
qgen_cache *qgen_cache_open(const char *dir);
void qgen_cache_close(qgen_cache *c);

/* QGEN_CACHE: 1 on (unset, empty, on, 1), 0 off (off, 0; case-insensitive words), -1 any
   other value (why in err). */
int qgen_cache_env(char *err, size_t errlen);

/* The directory qgen_cache_open(dir) would use (absolute), into buf, without making it:
   0, or -1 when the cache is memory only (QGEN_CACHE=off: why is ""; no HOME, a name too
   long: why says so). */
int qgen_cache_resolve(const char *dir, char *buf, size_t n, char *why, size_t whyn);

/* The directory in use (absolute), or NULL when memory-only. */
const char *qgen_cache_dir(const qgen_cache *c);

/* Why the directory asked for is not in use (it cannot be made, or others may write it),
   as the warning said it; "" when it is in use, or when the cache is memory-only by
   choice (QGEN_CACHE=off). */
const char *qgen_cache_problem(const qgen_cache *c);

/* Look an entry up. Returns 1 on a hit (*data is a fresh malloc copy the caller frees,
   *size its length), 0 on a miss (absent, corrupt, other version/key). */
int qgen_cache_get(qgen_cache *c, const char *name, const uint8_t key[32], void **data,
                   size_t *size);

/* Store an entry (memory always; disk when writable), recording spec, the name of the
   spec that built it (sanitized as names are, cut to 79 bytes; NULL: none). Returns 0 when
   it reached the disk, 1 when it is held in memory only (no usable directory, a failed
   write, or a payload larger than QGEN_CACHE_MAX_ENTRY), -1 on OOM or bad arguments. */
int qgen_cache_put(qgen_cache *c, const char *name, const char *spec, const uint8_t key[32], const void *data,
                   size_t size);

/* The path an entry has (or would have) on disk; "" when memory-only. */
void qgen_cache_entry_path(const qgen_cache *c, const char *name, const uint8_t key[32],
                           char *buf, size_t n);

/* One entry file, as qgen_cache_list reports it. */
typedef struct qgen_cache_item {
  const char *file;    /* its name in the directory */
  const char *spec;    /* the spec that wrote it; "" when unknown (format 1) or it does not verify */
  uint64_t size;       /* bytes on disk */
  const char *problem; /* NULL when it verifies (the whole file checks out and its key
                          matches its name), else why not */
} qgen_cache_item;

/* Walk the entries on disk (the files named like entries: "<name>-<16 hex>.qgc"): cb for
   each. Returns the number walked (0 when memory-only or the directory does not exist
   yet), or -1 (errno set) when the directory can't be read. */
int qgen_cache_list(qgen_cache *c, void (*cb)(void *ud, const qgen_cache_item *it), void *ud);

/* Remove the entries from the directory: the regular files named like entries that start
   with the entry magic, and the stale temp files of their writes ("<entry>.tmp.<pid>.<n>.
   <ns>" exactly; stale when the process named in it is gone, or it is over a minute old:
   a write in progress is kept). Every other file is left where it is and named to
   left(ud, file) (may be NULL). Returns the count removed, or -1 with errno set (the first
   failed removal; the others are still tried). The in-memory copies are dropped too, so a
   later get misses until the next put. */
int qgen_cache_clear(qgen_cache *c, void (*left)(void *ud, const char *file), void *ud);

#endif
