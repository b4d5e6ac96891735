/**
 * The dpkg and apt configuration a Debian preset carries, written before its first package is
 * installed: the build and every `apt-get install` in a sandbox later behave alike.
 *
 * - dpkg leaves documentation, man pages, translations and Python packages' test suites out
 *   (presets.ts DPKG_EXCLUDES), and py3compile does not try to compile those tests; dpkg does not
 *   fsync every file it writes (an image is built whole or thrown away; a sandbox's writable
 *   layer does not outlive it).
 * - apt installs no Recommends unless asked (`--install-recommends`).
 * - apt downloads as root: its `_apt` sandbox user needs CAP_SETUID/CAP_SETGID to switch to,
 *   which a sandbox's root does not hold by default; the sandbox is the boundary here. Written
 *   after the build, whose apt runs on the host as root and keeps its sandbox.
 */
import { DPKG_EXCLUDES } from './presets.js'

export const DPKG_CONFIG_FILE = 'etc/dpkg/dpkg.cfg.d/krunbox'
/** py3compile's exclusions: it byte-compiles every .py file dpkg lists, excluded or not, and fails on a missing one. */
export const PY3COMPILE_EXCLUDES_FILE = 'usr/share/python3/bcep/krunbox'
export const APT_CONFIG_FILE = 'etc/apt/apt.conf.d/90krunbox'
/** What mmdebstrap writes for its --aptopt/--dpkgopt options: the build's alone, removed afterwards. */
export const MMDEBSTRAP_CONFIG_FILES = ['etc/apt/apt.conf.d/99mmdebstrap', 'etc/dpkg/dpkg.cfg.d/99mmdebstrap']

/** dpkg's, written before the first package is unpacked. */
export function dpkgConfig(): string {
  const filters = DPKG_EXCLUDES.flatMap(({ dir, keep }) => [
    `path-exclude=/${dir}/*`,
    ...(keep === undefined ? [] : [`path-include=/${dir}/${keep}`]),
  ])
  return [
    '# krunbox: no docs, man pages, translations or Python test suites; no fsync per file',
    'force-unsafe-io',
    ...filters,
    '',
  ].join('\n')
}

/** py3compile's (type|versions|directory|pattern): the test suites dpkg leaves out are not compiled either. */
export function py3compileExcludes(): string {
  return 're|-|/usr/lib/python3/dist-packages/|.*/tests/.*\n'
}

/** apt's, written once the build is done (the build's own apt, on the host as root, keeps its _apt sandbox). */
export function aptConfig(): string {
  return [
    '// krunbox: no Recommends unless asked; downloads as root (the _apt user needs CAP_SETUID, which a sandbox does not give)',
    'APT::Install-Recommends "false";',
    'APT::Sandbox::User "root";',
    '',
  ].join('\n')
}
