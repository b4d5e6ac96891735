/**
 * An exported tree image (a preset or custom base) carries the environment its image gives
 * commands: a python preset's PATH with /opt/venv first, so `pip` and `python3` in the exported
 * image are the ones the sandbox had. (Issue 41, export.)
 */
import { describe, expect, it } from 'vitest'
import { imageConfig } from '../../lib/images/oci/export-config.js'

const envOf = (treeEnv?: Record<string, string>, set: Record<string, string> = {}) =>
  JSON.parse(imageConfig({ base: null, set: { env: set }, diffIds: [], added: [], treeEnv }).blob.body.toString())
    .config.Env as string[]

describe('the config of an exported tree image', () => {
  it("starts from the image's own environment, then the export's", () => {
    const venv = { PATH: '/opt/venv/bin:/usr/local/bin:/usr/bin:/bin', VIRTUAL_ENV: '/opt/venv' }
    expect(envOf(venv)).toEqual(['PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin', 'VIRTUAL_ENV=/opt/venv'])
    expect(envOf(venv, { VIRTUAL_ENV: '/srv/env' })).toContain('VIRTUAL_ENV=/srv/env')
    expect(envOf()).toEqual(['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'])
  })
})
