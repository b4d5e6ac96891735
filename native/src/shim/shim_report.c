#include "shim_report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Appends s to out as a JSON string literal; returns the new length. */
static size_t put_json_string(char *out, size_t len, size_t cap, const char *s) {
  static const char hex[] = "0123456789abcdef";
  if (len < cap) out[len++] = '"';
  for (; *s != '\0' && len + 7 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      out[len++] = '\\';
      out[len++] = (char)c;
    } else if (c < 0x20) {
      memcpy(out + len, "\\u00", 4);
      out[len + 4] = hex[c >> 4];
      out[len + 5] = hex[c & 15];
      len += 6;
    } else {
      out[len++] = (char)c;
    }
  }
  if (len < cap) out[len++] = '"';
  return len;
}

void shim_print_json_string(FILE *out, const char *s) {
  if (s == NULL) {
    fputs("null", out);
    return;
  }
  char buffer[1024];
  size_t len = put_json_string(buffer, 0, sizeof buffer - 1, s);
  fwrite(buffer, 1, len, out);
}

static void write_all(int fd, const char *buffer, size_t length) {
  while (length > 0) {
    ssize_t n = write(fd, buffer, length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; /* fd 4 not open or closed by the host: nothing to report to */
    buffer += n;
    length -= (size_t)n;
  }
}

void shim_fail(const char *stage, const char *call, int error_number, const char *message) {
  char line[8192];
  size_t cap = sizeof line - 2;
  size_t len = 0;
  len += (size_t)snprintf(line, cap, "{\"stage\":");
  len = put_json_string(line, len, cap, stage);
  len += (size_t)snprintf(line + len, cap - len, ",\"call\":");
  if (call == NULL) {
    len += (size_t)snprintf(line + len, cap - len, "null");
  } else {
    len = put_json_string(line, len, cap, call);
  }
  len += (size_t)snprintf(line + len, cap - len, ",\"errno\":%d,\"message\":", error_number);
  len = put_json_string(line, len, cap, message);
  line[len++] = '}';
  line[len++] = '\n';
  write_all(SHIM_BOOT_ERROR_FD, line, len);
  fprintf(stderr, "krun-shim: %s failed: %s (errno %d)\n", call != NULL ? call : stage, message, error_number);
  exit(SHIM_EXIT_BOOT_ERROR);
}
