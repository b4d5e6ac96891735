#!/bin/sh
# Idempotent project set-up for a fresh machine: Debian packages, npm dependencies, the agent,
# the native addon, the library build and the base image. Each step is skipped when up to date.
set -eu
cd "$(dirname "$0")/.."

step() { printf '[setup] %s\n' "$*" >&2; }

# 1. Debian binary packages only (never source packages: a mirror need not serve them):
#    bubblewrap (namespace driver), golang-go (the agent), mmdebstrap and zstd (images),
#    uidmap (rootless image builds), clang-format (`npm run lint` checks native/ with it),
#    tmux (test/cli/pty-tmux.test.ts types into `krunbox run -it` and reads its screen),
#    and the C++ cross compiler for the other architecture, so that `npm pack` (prepack) ships
#    the addon prebuilt for both linux-x64 and linux-arm64.
case $(uname -m) in
  x86_64) cross_compiler=g++-aarch64-linux-gnu ;;
  aarch64) cross_compiler=g++-x86-64-linux-gnu ;;
  *) cross_compiler="" ;;
esac
# Installs the Debian packages of $3… that are missing; $1 names them in messages, $2 is extra
# apt-get flags. As root directly, else through sudo -n, else it says what to install and fails.
install_debian_packages() {
  label=$1 flags=$2
  shift 2
  missing=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  [ -n "$missing" ] || return 0
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
    echo "krunbox setup: please install these Debian packages as root (apt-get install $flags):$missing" >&2; exit 1
  fi
  step "installing Debian packages$label:$missing"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q $flags $missing >/dev/null 2>&1 || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $flags $missing >/dev/null; }
  installed_now=$missing
}

install_debian_packages "" "" bubblewrap golang-go mmdebstrap zstd uidmap clang-format tmux $cross_compiler

# 1b. For the OCI image tests only, without their recommends (which would pull in a daemon's
#     worth of packages): docker-registry (CNCF distribution, run by the tests as a child
#     process on loopback), apache2-utils (htpasswd, for its Basic auth), and skopeo and umoci
#     (the export tests read what krunbox writes with them).
installed_now=""
install_debian_packages " for the OCI tests" --no-install-recommends docker-registry apache2-utils skopeo umoci
case $installed_now in
  # The package starts its own registry service on port 5000; the tests start theirs.
  *docker-registry*) if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now docker-registry >/dev/null 2>&1 || true; fi ;;
esac

# 1c. For bench/code-interpreter.ts only: the same Jupyter kernel and client on the host, its
#     same-run baseline (Debian's python3, not any other python on PATH).
install_debian_packages " for the code interpreter's bench" --no-install-recommends python3-ipykernel python3-jupyter-client

# 2. npm dependencies (from the lockfile).
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  step "installing npm dependencies"
  # npm install, not npm ci: this npm writes lockfiles without other platforms' optional
  # packages, which its own `npm ci` then refuses as out of sync.
  npm install --no-save --no-audit --no-fund --loglevel=error
fi

# 3. The agent (a static Go binary), 4. the native addon and krun-shim; first the code both
#    sides generate from the protocol contract (rewrites only what changed).
node scripts/gen-protocol.mjs
sh agent/build.sh
sh scripts/build-native.sh

# 5. The library (dist/, used by the CLI and by consumers).
if [ ! -f dist/index.js ] || [ -n "$(find lib tsup.config.ts package.json -newer dist/index.js -print -quit)" ]; then
  step "building the library"
  npx tsup --silent >/dev/null
fi

# 6. The base image (a no-op once cached).
npx tsx scripts/prepare-images.ts base
