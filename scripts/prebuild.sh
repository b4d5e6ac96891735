#!/bin/sh
# Builds everything the published package ships; `npm pack` and `npm publish` run it (prepack):
#   dist/                                        the library: ESM, CommonJS and types (tsup)
#   agent/dist/linux-amd64/krunbox-agent         the agent for both architectures: Go cross-compiles,
#   agent/dist/linux-arm64/krunbox-agent         so a user never needs Go
#   prebuilds/linux-x64/krunbox.glibc.node       the addon (prebuildify --napi) with krun-shim and
#   prebuilds/linux-arm64/krunbox.glibc.node     krunbox-reaper (static) beside it, found by node-gyp-build;
#                                                arm64 only where Debian's cross compiler
#                                                (g++-aarch64-linux-gnu, with its libc6-dev) is installed
# Each part is rebuilt only when a hash of its sources changed (KRUNBOX_PREBUILD_FORCE=1: all).
# The addon is built in a staging copy under build/prebuild/, never in build/Release (the
# development build, which node-gyp-build would otherwise prefer and prebuildify would wipe).
# KRUNBOX_PREBUILD_REQUIRE_ARM64=1 makes a missing cross compiler an error instead of a notice.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if command -v flock >/dev/null 2>&1; then
  mkdir -p build
  exec 8>build/.prebuild.lock
  flock 8
fi

say() { printf '[prebuild] %s\n' "$*" >&2; }

sources_hash() {
  for f in "$@"; do printf '%s\n' "$f"; cat "$f"; done | sha256sum | cut -d' ' -f1
}

# stamp hash output...: true when the stamp holds the hash and every output exists
fresh() {
  stamp=$1 hash=$2
  shift 2
  [ "${KRUNBOX_PREBUILD_FORCE:-0}" != 1 ] || return 1
  [ "$(cat "$stamp" 2>/dev/null || true)" = "$hash" ] || return 1
  for f in "$@"; do [ -e "$f" ] || return 1; done
}

mkdir -p build/prebuild

# 1. The library. Fresh when newer than its sources: the same rule as setup.sh and the test
#    harness, so packing never rebuilds (and briefly removes) a dist/ other processes are using.
if [ -f dist/index.js ] && [ -f dist/index.cjs ] && [ -f dist/index.d.cts ] && [ -f dist/cli.js ] &&
  [ "${KRUNBOX_PREBUILD_FORCE:-0}" != 1 ] && [ -z "$(find lib tsup.config.ts package.json -newer dist/index.js -print -quit)" ]; then
  say "dist/ up to date"
else
  npx --no-install tsup --silent >/dev/null
  say "dist/ built"
fi

# 2. The agent, static, for both architectures.
agent_hash=$(sources_hash $(find agent -path agent/dist -prune -o -type f \( -name '*.go' -o -name go.mod \) ! -name '*_test.go' -print | LC_ALL=C sort))
for goarch in amd64 arm64; do
  out=agent/dist/linux-$goarch/krunbox-agent
  if fresh "build/prebuild/.agent-$goarch.sha256" "$agent_hash" "$out"; then
    say "$out up to date"
    continue
  fi
  mkdir -p "agent/dist/linux-$goarch"
  (cd agent && CGO_ENABLED=0 GOOS=linux GOARCH=$goarch go build -trimpath -ldflags='-s -w' -o "dist/linux-$goarch/krunbox-agent" .)
  printf '%s\n' "$agent_hash" >"build/prebuild/.agent-$goarch.sha256"
  say "$out built"
done

# 3. The addon, krun-shim and krunbox-reaper, per Node architecture.
native_hash=$(sources_hash $(find binding.gyp native -type f \( -name '*.gyp' -o -name '*.c' -o -name '*.cc' -o -name '*.h' \) | LC_ALL=C sort))
host_arch=$(node -p process.arch)
for arch in x64 arm64; do
  out=prebuilds/linux-$arch
  if fresh "build/prebuild/.addon-$arch.sha256" "$native_hash" "$out/krunbox.glibc.node" "$out/krun-shim" "$out/krunbox-reaper" "$out/krunbox-reset"; then
    say "$out up to date"
    continue
  fi
  cross=""
  if [ "$arch" != "$host_arch" ]; then
    case $arch in
      arm64) cross=aarch64-linux-gnu ;;
      x64) cross=x86_64-linux-gnu ;;
    esac
    if ! command -v "$cross-g++" >/dev/null 2>&1; then
      msg="no $cross-g++ on PATH: $out not built (Debian: apt-get install g++-$cross)"
      if [ "${KRUNBOX_PREBUILD_REQUIRE_ARM64:-0}" = 1 ]; then echo "prebuild: $msg" >&2; exit 1; fi
      say "$msg"
      continue
    fi
  fi
  stage=build/prebuild/stage-$arch
  rm -rf "$stage"
  mkdir -p "$stage"
  cp -R binding.gyp native "$stage/"
  printf '{ "name": "krunbox", "private": true }\n' >"$stage/package.json"
  if [ -n "$cross" ]; then
    (cd "$stage" && CC=$cross-gcc CXX=$cross-g++ LINK=$cross-g++ AR=$cross-ar \
      npx --no-install prebuildify --napi --tag-libc --strip --strip-bin "$cross-strip" --arch "$arch" >build.log 2>&1) ||
      { cat "$stage/build.log" >&2; exit 1; }
    strip_bin=$cross-strip
  else
    (cd "$stage" && npx --no-install prebuildify --napi --tag-libc --strip >build.log 2>&1) || { cat "$stage/build.log" >&2; exit 1; }
    strip_bin=strip
  fi
  rm -rf "$out"
  mkdir -p "$out"
  cp "$stage/prebuilds/linux-$arch/"*.node "$out/"
  # krun-shim, krunbox-reaper and krunbox-reset are resolved next to the addon (lib/native.ts).
  for exe in krun-shim krunbox-reaper krunbox-reset; do
    cp "$stage/build/Release/$exe" "$out/$exe"
    "$strip_bin" --strip-all "$out/$exe"
  done
  rm -rf "$stage"
  printf '%s\n' "$native_hash" >"build/prebuild/.addon-$arch.sha256"
  say "$out built ($(ls "$out" | tr '\n' ' '))"
done
