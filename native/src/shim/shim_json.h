/*
 * A deliberately small JSON reader for krun-shim's configuration: one object
 * whose values are strings, integers, booleans, null, or arrays of strings.
 * Anything else (nested objects, fractions, exponents, NUL characters inside
 * strings) is rejected, so the shim never has to guess.
 */
#ifndef KRUNBOX_SHIM_JSON_H
#define KRUNBOX_SHIM_JSON_H

#include <stddef.h>

enum json_kind { JSON_NULL, JSON_BOOL, JSON_INT, JSON_STRING, JSON_STRING_ARRAY };

struct json_value {
  enum json_kind kind;
  int boolean;
  long long integer;
  char *string;   /* JSON_STRING, NUL-terminated UTF-8 */
  char **strings; /* JSON_STRING_ARRAY, NULL-terminated */
  size_t count;   /* JSON_STRING_ARRAY length */
};

struct json_member {
  char *key;
  struct json_value value;
};

struct json_object {
  struct json_member *members;
  size_t count;
};

/* Returns 0 on success; on failure -1 with a static message in *error and the
 * byte offset of the problem in *error_offset. Memory is never freed: the
 * shim either exits or hands everything to libkrun. */
int json_parse_object(const char *text, size_t length, struct json_object *out, const char **error,
                      size_t *error_offset);

#endif
