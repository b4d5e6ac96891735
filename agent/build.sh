#!/bin/sh
# Builds the static krunbox agent into agent/dist/krunbox-agent (works from any cwd).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$here/dist"
cd "$here"
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$here/dist/krunbox-agent" .
