#!/bin/sh
# What `npm test` checks before any test runs: the linter's rules (eslint.config.js), that every
# file is laid out as its formatter lays it out (scripts/format-all.sh fixes that), and `go vet`
# on the agent. Each check runs even when an earlier one failed, so one run lists everything.
set -u
cd "$(dirname "$0")/.."
status=0
fail() { printf 'lint: %s\n' "$*" >&2; status=1; }

npx eslint . || fail 'eslint found the problems above'
npx prettier --check --log-level warn . || fail 'prettier would reformat the files above (sh scripts/format-all.sh)'

unformatted=$(gofmt -l agent)
[ -z "$unformatted" ] || fail "gofmt would reformat: $unformatted (sh scripts/format-all.sh)"
(cd agent && go vet ./...) || fail 'go vet found the problems above'

if command -v clang-format >/dev/null 2>&1; then
  find native \( -name '*.c' -o -name '*.cc' -o -name '*.h' \) -exec clang-format --dry-run --Werror {} + ||
    fail 'clang-format would reformat the native files above (sh scripts/format-all.sh)'
else
  fail 'clang-format is missing (scripts/setup.sh installs the Debian package clang-format)'
fi
exit $status
