#!/bin/sh
# Formats the whole tree once: TypeScript and JavaScript with prettier (.prettierrc.json), the
# agent with gofmt, the native programs with clang-format (.clang-format). `npm run lint` then
# checks that each stays so. Run it on a clean tree and commit its result on its own (only
# layout changes), so reviews and `git blame --ignore-rev` can skip that commit.
set -eu
cd "$(dirname "$0")/.."

# Twice: prettier may lay out a long member chain differently on a second pass (lib/command.ts),
# and the check must see a tree that is already its own fixed point.
npx prettier --write --log-level warn .
npx prettier --write --log-level warn .
gofmt -w agent
find native \( -name '*.c' -o -name '*.cc' -o -name '*.h' \) -exec clang-format -i {} +
