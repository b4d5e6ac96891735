#!/usr/bin/env node
'use strict'
// The package's install step. Where a prebuilt addon fits this host, node-gyp-build finds it and
// nothing is compiled. Where none fits, node-gyp-build falls back to node-gyp, whose errors (no
// Python, no compiler) say nothing of krunbox or of what is missing: one line says it first.
const { spawnSync } = require('node:child_process')
const path = require('node:path')

const root = path.join(__dirname, '..')

function libc() {
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null
  return report?.header?.glibcVersionRuntime ? 'glibc' : 'musl'
}

function prebuildProblem() {
  try {
    require('node-gyp-build')(root)
    return null
  } catch (err) {
    const target = `${process.platform}-${process.arch}/node-abi ${process.versions.modules} (${libc()})`
    const first = String(err && err.message).split('\n')[0]
    return /No native build was found/.test(first)
      ? `no prebuilt addon for ${target}`
      : `the prebuilt addon for ${target} does not load (${first})`
  }
}

const problem = prebuildProblem()
// The addon loads (a prebuild, or a build/ of a checkout): nothing to do, as node-gyp-build's own test would conclude.
if (problem === null) process.exit(0)
process.stderr.write(
  `krunbox: ${problem}; building from source needs python3, make and a C++ compiler ` +
    '(apt-get install python3 make g++ | dnf install python3 make gcc-c++ | pacman -S python make gcc); node-gyp follows\n',
)
const result = spawnSync(process.execPath, [require.resolve('node-gyp-build/bin.js')], { cwd: root, stdio: 'inherit' })
process.exit(result.status ?? 1)
