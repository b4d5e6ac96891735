/**
 * The built-in images. `base` is busybox-static unpacked, nothing configured (about 2 MB). Every
 * other preset is a real Debian system: Debian's essential set and apt, with every maintainer
 * script run (alternatives, generated files, triggers, ldconfig) and dpkg's database kept, so
 * `apt-get install` works inside. busybox-static rides along for the tools no package brings
 * (wget, nc, ip, ps, vi...); its applets are linked only where no package has the command.
 *
 * Node is not Debian's (no Debian suite carries a supported LTS line of it): the node presets
 * carry the official binary of a supported LTS from the npm registry (see npm-package.ts) and
 * the npm of that line, installed to /usr/local; Debian brings only the C++ runtime it needs.
 */

export interface PresetDefinition {
  name: string
  description: string
  packages: readonly string[]
  /** 'extract': the packages unpacked, no maintainer script run (base); 'debian': a configured Debian system with apt. */
  system: 'extract' | 'debian'
  /** A virtual environment at PYTHON_VENV that sees Debian's Python packages, first on every command's PATH. */
  pythonVenv: boolean
  /** Node from the npm registry: the newest release of an LTS major and the npm major it ships with. */
  node: NodeFromRegistry | null
  /** tslab, the Jupyter kernel for JavaScript and TypeScript (tslab.ts), installed with the preset's npm. */
  tslab?: true
}

export interface NodeFromRegistry {
  major: number
  npmMajor: number
}

/** Node 24 is the LTS line (active until October 2026, supported until April 2028); it ships npm 11. */
export const NODE_LTS: NodeFromRegistry = { major: 24, npmMajor: 11 }

/** Bumped whenever post-steps change what ends up in an image, so ids change with them. */
export const POST_STEPS_VERSION = 4

/** Where the python presets' default virtual environment is. */
export const PYTHON_VENV = '/opt/venv'

/** Paths removed after extraction from `base` (relative to the root; `*` is one path segment). */
export const EXTRACT_TRIMS: readonly string[] = [
  'usr/share/doc/*/*!copyright',
  'usr/share/man',
  'usr/share/info',
  'usr/share/locale/*!locale.alias',
  'usr/share/lintian',
  'usr/share/linda',
  'usr/share/bug',
  'usr/share/doc-base',
  'usr/share/initramfs-tools',
  'var/cache/apt',
  'var/lib/apt',
  'var/log/*',
  'etc/apt',
]

/**
 * What dpkg leaves out of a Debian preset, in the image's own dpkg configuration (so packages
 * installed later inside leave them out too): each directory's entries, but `keep`.
 */
export const DPKG_EXCLUDES: ReadonlyArray<{ dir: string; keep?: string }> = [
  { dir: 'usr/share/doc/*', keep: 'copyright' },
  { dir: 'usr/share/man' },
  { dir: 'usr/share/info' },
  { dir: 'usr/share/locale', keep: 'locale.alias' },
  { dir: 'usr/share/lintian' },
  { dir: 'usr/share/linda' },
  // Python packages' own test suites (pandas.tests, scipy's and sympy's): 160 MB of the
  // scientific recipe; py3compile is told to skip them too (debian-config.ts).
  { dir: 'usr/lib/python3/dist-packages/*/tests' },
]

/**
 * The same paths as trims: mmdebstrap unpacks the essential packages with tar before dpkg
 * runs, so their copies are removed afterwards (dpkg records excluded files and never expects them).
 */
export const DEBIAN_TRIMS: readonly string[] = DPKG_EXCLUDES.map(({ dir, keep }) =>
  keep === undefined ? `${dir}/*` : `${dir}/*!${keep}`,
)

export const PRESETS = {
  base: {
    name: 'base',
    description: 'busybox (static) with applet links, minimal /etc',
    packages: ['busybox-static'],
    system: 'extract',
    pythonVenv: false,
    node: null,
  },
  python: {
    name: 'python',
    description: `Debian with apt, python3, pip and venv; a default virtual environment at ${PYTHON_VENV}`,
    packages: ['busybox-static', 'ca-certificates', 'python3', 'python3-pip', 'python3-venv'],
    system: 'debian',
    pythonVenv: true,
    node: null,
  },
  node: {
    name: 'node',
    description: `Debian with apt; Node ${NODE_LTS.major} LTS (the official binary, from the npm registry) and npm ${NODE_LTS.npmMajor}`,
    packages: ['busybox-static', 'ca-certificates', 'libstdc++6'],
    system: 'debian',
    pythonVenv: false,
    node: NODE_LTS,
  },
  'python-node': {
    name: 'python-node',
    description: `the python preset with Node ${NODE_LTS.major} LTS and npm ${NODE_LTS.npmMajor}`,
    packages: ['busybox-static', 'ca-certificates', 'libstdc++6', 'python3', 'python3-pip', 'python3-venv'],
    system: 'debian',
    pythonVenv: true,
    node: NODE_LTS,
  },
  'code-interpreter': {
    name: 'code-interpreter',
    description: `the python-node preset with Jupyter's Python kernel (ipykernel), numpy, pandas and matplotlib, and tslab for JavaScript and TypeScript, for sb.runCode`,
    packages: [
      'busybox-static',
      'ca-certificates',
      'libstdc++6',
      'python3',
      'python3-pip',
      'python3-venv',
      'python3-ipykernel',
      'python3-jupyter-client',
      'python3-numpy',
      'python3-pandas',
      'python3-matplotlib',
    ],
    system: 'debian',
    pythonVenv: true,
    node: NODE_LTS,
    tslab: true,
  },
} as const satisfies Record<string, PresetDefinition>

export type PresetName = keyof typeof PRESETS

/** Debian's current stable; the previous one (bookworm) is selectable (ImageStore suite, Runtime images.suite). */
export const DEFAULT_SUITE = 'trixie'

export function isPresetName(name: string): name is PresetName {
  return Object.hasOwn(PRESETS, name)
}
