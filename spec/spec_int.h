/* spec_int.h — what the spec loader's files share (private to spec/).
 *
 * sandbox.c runs the chunk in a limited Lua state and raises errors with the chunk's
 * position; validate.c checks the fields (and is the spec{} function) and formats values
 * for its messages; canon.c writes a spec back as text.
 */
#ifndef QGEN_SPEC_INT_H
#define QGEN_SPEC_INT_H

#include <stddef.h>

#include <lua.h>

#include "spec/spec.h"

/* sandbox.c */

/* Current line of the function at stack level `level`, 0 when unknown (a C function). */
int spec_line_at(lua_State *L, int level);

/* Raise "path[:line]: message" as a Lua error. */
_Noreturn void spec_raise_at(lua_State *L, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The line of the field `path` ("n_head", "sparse.block", "archs[2]") in the table
   constructor of the spec{} call on line call_line of the running chunk's source: the
   deepest of its components written there, or call_line when the table is not written
   there (built elsewhere and passed in). */
int spec_field_line(lua_State *L, int call_line, const char *path);

/* validate.c */

/* Shortest "%.{15,16,17}g" that reads back to d, with ".0" added where Lua would read
   an integer. */
void spec_fmt_double(char *buf, size_t n, double d);

/* A Lua-looking rendering of any value, one line, at most about 60 characters. */
void spec_fmt_value(lua_State *L, int idx, char *buf, size_t n);

/* A table key as it would follow "prefix": "name", "[1]", "[\"a b\"]". */
void spec_fmt_key(lua_State *L, int idx, const char *prefix, char *buf, size_t n);

/* "a boolean", "an integer", ... for messages. */
const char *spec_a_type(lua_State *L, int idx);

/* The name of compute capability cc ("sm_90"), "sm_?" when unknown. */
const char *spec_arch_name(int cc);

/* Prepare the state for spec{} (its registry of marked tables). */
void spec_open_marks(lua_State *L);

/* spec{...}: validate now, remember the line, return the table. */
int spec_l_spec(lua_State *L);

/* Validate what the chunk returned (at idx) into *set; raises on the first error. */
void spec_take_result(lua_State *L, int idx, qgen_spec_set *set);

#endif
