#!/bin/sh
# Builds bwrap/dist/bwrap: Debian's bubblewrap, from the source package of the installed
# version with Debian's patches applied, linked statically (static-pie) against musl, with
# libcap from its own Debian source package.
#
# Why: bwrap stays behind as each sandbox's monitor. The Debian binary, linked dynamically to
# glibc, libselinux, pcre2 and libcap, holds 1.9 MiB RSS (PSS 0.29 MiB) doing so; this build
# holds 0.16 MiB (PSS 0.04 MiB). SELinux labelling (--exec-label, --file-label) is left out:
# krunbox never asks for it.
#
# Idempotent: skipped while bwrap/dist/.stamp matches the installed source versions, the
# installed /usr/bin/bwrap and this script. Exits non-zero on any failure and then leaves no
# binary behind, so the namespace driver falls back to the bwrap on PATH.
# Needs: musl-tools, dpkg-dev, make, libc6-dev.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/bwrap/dist"
self_hash=$(sha256sum "$0" | cut -d' ' -f1)

source_version() { dpkg-query -W -f='${source:Version}' "$1" 2>/dev/null; }
bwrap_version=$(source_version bubblewrap) || { echo "build-bwrap: the bubblewrap package is not installed" >&2; exit 1; }
libcap_version=$(source_version libcap2) || { echo "build-bwrap: the libcap2 package is not installed" >&2; exit 1; }
# The Debian binary this build stands in for, and its size and mtime (dpkg sets the package's):
# when a package update changes them, the library goes back to that binary until this script
# has run again.
system_bwrap=$(dpkg-query -L bubblewrap | grep -m 1 '/bin/bwrap$')
system_identity=$(stat -L -c '%s:%Y' "$system_bwrap")
stamp="bubblewrap=$bwrap_version libcap2=$libcap_version system=$system_bwrap@$system_identity script=$self_hash"
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9 # concurrent set-ups wait for one build
if [ -x "$out/bwrap" ] && [ "$(cat "$out/.stamp" 2>/dev/null || true)" = "$stamp" ]; then
  echo "build-bwrap: static bwrap up to date"
  exit 0
fi
rm -f "$out/bwrap" "$out/.stamp" "$out/system-bwrap"

start=$(date +%s%3N)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
fail() { # log message
  cat "$1" >&2
  echo "build-bwrap: $2" >&2
  exit 1
}

# 1. Source packages, through a private APT state: the system's own 'deb' entries as 'deb-src'.
#    The system's APT configuration and lists stay untouched.
mkdir -p "$tmp/apt/parts" "$tmp/apt/lists/partial" "$tmp/apt/cache/archives/partial"
for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  if [ -f "$list" ]; then sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$list" >>"$tmp/apt/sources.list"; fi
done
for sources in /etc/apt/sources.list.d/*.sources; do
  if [ -f "$sources" ]; then sed 's/^Types:.*/Types: deb-src/' "$sources" >"$tmp/apt/parts/$(basename "$sources")"; fi
done
touch "$tmp/apt/sources.list"
# APT::Sandbox::User: as root APT would download as _apt, which cannot write into the private
# (0700) state.
apt_private() {
  apt-get -q -o Dir::Etc::SourceList="$tmp/apt/sources.list" -o Dir::Etc::SourceParts="$tmp/apt/parts" \
    -o Dir::State::Lists="$tmp/apt/lists" -o Dir::Cache="$tmp/apt/cache" \
    -o APT::Sandbox::User="$(id -un)" -o Debug::NoLocking=1 "$@"
}
# A repository without source indexes makes update fail as a whole; what counts is whether
# the two source packages are found next.
apt_private update >"$tmp/apt.log" 2>&1 || true
fetch() { # package version: that version, or the newest one if the archive no longer has it
  mkdir -p "$tmp/$1"
  (cd "$tmp/$1" && { apt_private source --download-only "$1=$2" || apt_private source --download-only "$1"; }) >>"$tmp/apt.log" 2>&1 &&
    dpkg-source -x "$tmp/$1"/*.dsc "$tmp/$1/src" >>"$tmp/apt.log" 2>&1 ||
    fail "$tmp/apt.log" "could not fetch the source package $1"
}
fetch bubblewrap "$bwrap_version"
fetch libcap2 "$libcap_version"

# 2. musl sees the kernel's UAPI headers (linux/, asm/, asm-generic/) and nothing else of glibc's.
mkdir -p "$tmp/kernel-headers"
for dir in /usr/include/linux /usr/include/asm-generic "/usr/include/$(gcc -print-multiarch)/asm"; do
  ln -s "$dir" "$tmp/kernel-headers/$(basename "$dir")"
done
cc="musl-gcc -idirafter $tmp/kernel-headers"
cflags="-Os -fPIE -fstack-protector-strong -Wall"

# 3. libcap.a (bwrap needs cap_from_name) for musl.
make -C "$tmp/libcap2/src/libcap" CC="$cc" BUILD_CC=gcc USE_GPERF=no libcap.a >"$tmp/make.log" 2>&1 ||
  fail "$tmp/make.log" "libcap did not build"

# 4. bwrap itself, as a static PIE (musl-gcc's specs have no -static-pie, so the link is spelled out).
src="$tmp/bubblewrap/src"
upstream=$(sed -n "s/^[[:space:]]*version[[:space:]]*:[[:space:]]*'\([^']*\)'.*/\1/p" "$src/meson.build" | head -n 1)
printf '#define PACKAGE_STRING "bubblewrap %s"\n' "$upstream" >"$src/config.h"
musl=$(dirname "$(dpkg-query -L musl-dev | grep '/rcrt1\.o$')")
# shellcheck disable=SC2086
$cc $cflags -D_GNU_SOURCE -include "$src/config.h" -I"$src" -I"$tmp/libcap2/src/libcap/include" \
  -nostartfiles -Wl,-static,-pie,--no-dynamic-linker,-z,text,-z,relro,-z,now -s \
  -o "$tmp/bwrap" "$musl/rcrt1.o" "$musl/crti.o" \
  "$src/bubblewrap.c" "$src/bind-mount.c" "$src/network.c" "$src/utils.c" \
  "$tmp/libcap2/src/libcap/libcap.a" "$musl/libc.a" "$musl/crtn.o" 2>"$tmp/cc.log" ||
  fail "$tmp/cc.log" "bubblewrap did not build"

# 5. It must be self-contained and do what the system's bwrap does on this host.
if readelf -l "$tmp/bwrap" | grep -q INTERP; then fail /dev/null "the result is not static"; fi
try='--unshare-all --die-with-parent --ro-bind / / true'
# shellcheck disable=SC2086
if ! "$tmp/bwrap" $try 2>"$tmp/try.log" && "$system_bwrap" $try 2>/dev/null; then
  fail "$tmp/try.log" "the static bwrap fails where the system's works"
fi

mv "$tmp/bwrap" "$out/bwrap.new" && mv "$out/bwrap.new" "$out/bwrap"
printf '%s\n%s\n' "$system_bwrap" "$system_identity" >"$out/system-bwrap"
printf '%s\n' "$stamp" >"$out/.stamp"
echo "build-bwrap: static bwrap ($("$out/bwrap" --version), $(wc -c <"$out/bwrap") bytes) built in $(( $(date +%s%3N) - start )) ms"
