/**
 * The python presets' default virtual environment: `python3 -m venv --system-site-packages` at
 * PYTHON_VENV. Debian's own Python stays apt's (PEP 668: pip refuses to write there), so this is
 * where `pip install` goes without flags, while Debian's python3-* packages stay importable. It
 * is first on every command's PATH (the image's env) and on login shells' (/etc/profile.d).
 * Root, the default user, owns it; another user's `pip install` goes to its own ~/.local, which
 * a virtual environment that sees the system's site packages keeps on sys.path.
 *
 * Its pip is Debian's (python3-pip), run by the environment's python, which makes it install
 * there: no second copy of pip (13 MB, and ensurepip's install at every build).
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { runInTree } from './poststeps.js'
import { PYTHON_VENV } from './presets.js'
import { resolveInRoot } from './rootfs.js'

/** The agent's PATH for every command (agent/exec/env.go), behind the environment's bin. */
const AGENT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export function venvEnv(): Record<string, string> {
  return { PATH: `${PYTHON_VENV}/bin:${AGENT_PATH}`, VIRTUAL_ENV: PYTHON_VENV }
}

const PROFILE = `# krunbox: the default Python virtual environment first on PATH
case ":$PATH:" in *":${PYTHON_VENV}/bin:"*) ;; *) PATH="${PYTHON_VENV}/bin:$PATH" ;; esac
VIRTUAL_ENV=${PYTHON_VENV}
export PATH VIRTUAL_ENV
`

const PIP_LAUNCHER = `#!${PYTHON_VENV}/bin/python3
# krunbox: Debian's pip, run by this environment's python so that it installs here
import sys
from pip._internal.cli.main import main
sys.exit(main())
`

export async function createPythonVenv(root: string): Promise<void> {
  await runInTree(
    root,
    ['/usr/bin/python3', '-m', 'venv', '--system-site-packages', '--without-pip', PYTHON_VENV],
    'creating the default Python virtual environment',
  )
  for (const name of ['pip', 'pip3'])
    await fs.writeFile(await resolveInRoot(root, `${PYTHON_VENV}/bin/${name}`), PIP_LAUNCHER, { mode: 0o755 })
  const profile = await resolveInRoot(root, '/etc/profile.d/krunbox-venv.sh')
  await fs.mkdir(path.dirname(profile), { recursive: true })
  await fs.writeFile(profile, PROFILE, { mode: 0o644 })
}
