#!/bin/sh
# Builds krunbox's native parts (sources under native/src/, one folder per program, common/ shared):
#   build/Release/krunbox.node     the N-API addon          (node-gyp, binding.gyp; native/src/addon)
#   build/Release/krun-shim        one process per microVM  (node-gyp, binding.gyp; native/src/shim)
#   build/Release/krunbox-reaper   one process per sandbox  (node-gyp, binding.gyp; native/src/reaper, static)
#   build/Release/krunbox-reset    one run per pool reuse   (node-gyp, binding.gyp; native/src/reset, static)
#   build/test/libkrun-double*.so  the libkrun TEST DOUBLES (test/fixtures/libkrun-double/build.sh; never shipped)
# Idempotent: each part is rebuilt only when a hash of its sources changed.
# KRUNBOX_NATIVE_FORCE=1 rebuilds everything. Concurrent runs wait on a lock.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if command -v flock >/dev/null 2>&1; then
  mkdir -p build
  lock=build/.build-native.lock
  exec 9>"$lock"
  flock 9
fi

now_ms() { date +%s%3N; }

# sha256 over the names and contents of the given files
sources_hash() {
  for f in "$@"; do printf '%s\n' "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
}

up_to_date() { # stamp-file hash outputs...
  stamp=$1 hash=$2
  shift 2
  [ "${KRUNBOX_NATIVE_FORCE:-0}" != 1 ] || return 1
  [ "$(cat "$stamp" 2>/dev/null || true)" = "$hash" ] || return 1
  for out in "$@"; do [ -e "$out" ] || return 1; done
}

addon_sources=$(find binding.gyp native -type f \( -name '*.gyp' -o -name '*.c' -o -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort)
# shellcheck disable=SC2086
addon_hash=$(sources_hash $addon_sources)
addon_stamp=build/.addon-sources.sha256
if up_to_date "$addon_stamp" "$addon_hash" build/Release/krunbox.node build/Release/krun-shim build/Release/krunbox-reaper build/Release/krunbox-reset; then
  echo "build-native: addon, krun-shim, krunbox-reaper and krunbox-reset up to date"
else
  start=$(now_ms)
  # through npx so npm's configuration (e.g. nodedir for offline headers) applies
  npx --no-install node-gyp rebuild -j max --loglevel=warn >build-native.log 2>&1 || { cat build-native.log >&2; rm -f build-native.log; exit 1; }
  rm -f build-native.log
  printf '%s\n' "$addon_hash" >"$addon_stamp"
  echo "build-native: addon, krun-shim, krunbox-reaper and krunbox-reset built in $(( $(now_ms) - start )) ms"
fi

# The libkrun test doubles (tests only): their own script, next to their sources.
if [ -f test/fixtures/libkrun-double/build.sh ]; then sh test/fixtures/libkrun-double/build.sh; fi
