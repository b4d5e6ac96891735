#include "shim_json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct reader {
  const char *text;
  size_t length;
  size_t pos;
  const char *error;
};

static int fail(struct reader *r, const char *message) {
  if (r->error == NULL) r->error = message;
  return -1;
}

static void skip_space(struct reader *r) {
  while (r->pos < r->length) {
    char c = r->text[r->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    r->pos++;
  }
}

static int peek(struct reader *r) { return r->pos < r->length ? (unsigned char)r->text[r->pos] : -1; }

static int expect(struct reader *r, char c, const char *message) {
  skip_space(r);
  if (peek(r) != (unsigned char)c) return fail(r, message);
  r->pos++;
  return 0;
}

/* The configuration is a few hundred bytes: growing one element at a time is fine. */
static void *grow(void *array, size_t needed, size_t size) { return realloc(array, needed * size); }

static int hex_digit(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(struct reader *r, uint32_t *out) {
  if (r->pos + 4 > r->length) return fail(r, "truncated \\u escape");
  uint32_t value = 0;
  for (int i = 0; i < 4; i++) {
    int digit = hex_digit((unsigned char)r->text[r->pos + i]);
    if (digit < 0) return fail(r, "bad hex digit in \\u escape");
    value = value * 16 + (uint32_t)digit;
  }
  r->pos += 4;
  *out = value;
  return 0;
}

static size_t put_utf8(char *out, uint32_t cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decoded text is never longer than its escaped source, so one allocation of
 * the remaining input length bounds it. */
static int read_string(struct reader *r, char **out) {
  if (expect(r, '"', "expected a string") < 0) return -1;
  size_t start = r->pos;
  size_t end = start;
  while (end < r->length && r->text[end] != '"') end += r->text[end] == '\\' ? 2 : 1;
  if (end >= r->length) return fail(r, "unterminated string");
  char *buffer = malloc(end - start + 1);
  if (buffer == NULL) return fail(r, "out of memory");
  size_t n = 0;
  while (r->text[r->pos] != '"') {
    unsigned char c = (unsigned char)r->text[r->pos++];
    if (c < 0x20) return fail(r, "control character in string");
    if (c != '\\') {
      buffer[n++] = (char)c;
      continue;
    }
    char e = r->text[r->pos++];
    switch (e) {
      case '"':
        buffer[n++] = '"';
        break;
      case '\\':
        buffer[n++] = '\\';
        break;
      case '/':
        buffer[n++] = '/';
        break;
      case 'b':
        buffer[n++] = '\b';
        break;
      case 'f':
        buffer[n++] = '\f';
        break;
      case 'n':
        buffer[n++] = '\n';
        break;
      case 'r':
        buffer[n++] = '\r';
        break;
      case 't':
        buffer[n++] = '\t';
        break;
      case 'u': {
        uint32_t cp;
        if (read_hex4(r, &cp) < 0) return -1;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          uint32_t low;
          if (r->pos + 2 > r->length || r->text[r->pos] != '\\' || r->text[r->pos + 1] != 'u')
            return fail(r, "unpaired surrogate in \\u escape");
          r->pos += 2;
          if (read_hex4(r, &low) < 0) return -1;
          if (low < 0xDC00 || low > 0xDFFF) return fail(r, "unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return fail(r, "unpaired surrogate in \\u escape");
        }
        if (cp == 0) return fail(r, "NUL character in string");
        n += put_utf8(buffer + n, cp);
        break;
      }
      default:
        return fail(r, "bad escape in string");
    }
  }
  r->pos++; /* closing quote */
  buffer[n] = '\0';
  *out = buffer;
  return 0;
}

static int read_integer(struct reader *r, long long *out) {
  size_t start = r->pos;
  int negative = 0;
  if (peek(r) == '-') {
    negative = 1;
    r->pos++;
  }
  if (peek(r) < '0' || peek(r) > '9') return fail(r, "expected a digit");
  unsigned long long value = 0;
  while (peek(r) >= '0' && peek(r) <= '9') {
    value = value * 10 + (unsigned long long)(r->text[r->pos++] - '0');
    if (value > (unsigned long long)INT64_MAX) return fail(r, "integer out of range");
  }
  if (peek(r) == '.' || peek(r) == 'e' || peek(r) == 'E') return fail(r, "only integers are accepted");
  if (r->pos - start > 1 + (size_t)negative && r->text[start + (size_t)negative] == '0')
    return fail(r, "leading zero in number");
  *out = negative ? -(long long)value : (long long)value;
  return 0;
}

static int read_literal(struct reader *r, const char *word) {
  size_t n = strlen(word);
  if (r->pos + n > r->length || memcmp(r->text + r->pos, word, n) != 0) return fail(r, "unexpected token");
  r->pos += n;
  return 0;
}

static int read_string_array(struct reader *r, struct json_value *v) {
  r->pos++; /* '[' */
  v->kind = JSON_STRING_ARRAY;
  v->strings = NULL;
  v->count = 0;
  skip_space(r);
  if (peek(r) != ']') {
    for (;;) {
      v->strings = grow(v->strings, v->count + 1, sizeof(char *));
      if (v->strings == NULL) return fail(r, "out of memory");
      skip_space(r);
      if (peek(r) != '"') return fail(r, "arrays may only hold strings");
      if (read_string(r, &v->strings[v->count]) < 0) return -1;
      v->count++;
      skip_space(r);
      if (peek(r) == ',') {
        r->pos++;
        continue;
      }
      break;
    }
  }
  if (expect(r, ']', "expected ',' or ']' in array") < 0) return -1;
  v->strings = grow(v->strings, v->count + 1, sizeof(char *));
  if (v->strings == NULL) return fail(r, "out of memory");
  v->strings[v->count] = NULL;
  return 0;
}

static int read_value(struct reader *r, struct json_value *v) {
  memset(v, 0, sizeof *v);
  skip_space(r);
  int c = peek(r);
  if (c == '"') {
    v->kind = JSON_STRING;
    return read_string(r, &v->string);
  }
  if (c == '[') return read_string_array(r, v);
  if (c == 't') {
    v->kind = JSON_BOOL;
    v->boolean = 1;
    return read_literal(r, "true");
  }
  if (c == 'f') {
    v->kind = JSON_BOOL;
    v->boolean = 0;
    return read_literal(r, "false");
  }
  if (c == 'n') {
    v->kind = JSON_NULL;
    return read_literal(r, "null");
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    v->kind = JSON_INT;
    return read_integer(r, &v->integer);
  }
  if (c == '{') return fail(r, "nested objects are not accepted");
  return fail(r, "expected a value");
}

int json_parse_object(const char *text, size_t length, struct json_object *out, const char **error,
                      size_t *error_offset) {
  struct reader r = {text, length, 0, NULL};
  out->members = NULL;
  out->count = 0;
  int rc = expect(&r, '{', "expected '{'");
  skip_space(&r);
  if (rc == 0 && peek(&r) != '}') {
    for (;;) {
      out->members = grow(out->members, out->count + 1, sizeof(struct json_member));
      if (out->members == NULL) {
        rc = fail(&r, "out of memory");
        break;
      }
      struct json_member *m = &out->members[out->count];
      if (read_string(&r, &m->key) < 0 || expect(&r, ':', "expected ':'") < 0 || read_value(&r, &m->value) < 0) {
        rc = -1;
        break;
      }
      for (size_t i = 0; i < out->count; i++)
        if (strcmp(out->members[i].key, m->key) == 0) {
          rc = fail(&r, "duplicate key");
          break;
        }
      if (rc < 0) break;
      out->count++;
      skip_space(&r);
      if (peek(&r) == ',') {
        r.pos++;
        continue;
      }
      break;
    }
  }
  if (rc == 0) rc = expect(&r, '}', "expected ',' or '}'");
  if (rc == 0) {
    skip_space(&r);
    if (r.pos != r.length) rc = fail(&r, "trailing data after the object");
  }
  if (rc < 0) {
    *error = r.error;
    *error_offset = r.pos;
  }
  return rc;
}
