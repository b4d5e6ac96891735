/**
 * Canonical recipes and image ids. An id is the sha256 of the canonical JSON of the recipe
 * (preset, packages, suite, trims, post-steps version, Node major, recipe files by content)
 * together with the state of its sources: the digests of the archive's InRelease files the
 * build fetched and the npm packages it pinned (see sourceState).
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { summarizeTree } from './digest.js'
import { POST_STEPS_VERSION, PRESETS, TRIMS, isPresetName } from './presets.js'
import type { BuildRecipe, ImageRecipe, RecipeFile } from './types.js'
import { errors } from '../protocol/errors.gen.js'

/** JSON with object keys sorted, so equal values always serialize alike. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`
  }
  return JSON.stringify(value)
}

export function sha256Hex(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex')
}

export function recipeDigest(recipe: BuildRecipe): string {
  return sha256Hex(canonicalJson(recipe))
}

/** What an id takes from outside the recipe. */
export interface SourceState {
  /** sha256 of each InRelease file, sorted: the same archive state from any mirror gives the same id. */
  releases: string[]
  npm: Array<{ name: string; version: string; integrity: string }>
}

export function sourceState(
  releases: ReadonlyArray<{ sha256: string }>,
  npm: ReadonlyArray<{ name: string; version: string; integrity: string }>,
): SourceState {
  return {
    releases: releases.map((r) => r.sha256).sort(),
    npm: npm
      .map(({ name, version, integrity }) => ({ name, version, integrity }))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
  }
}

export function imageId(recipe: BuildRecipe, state: SourceState | string): string {
  return sha256Hex(canonicalJson({ recipe, sources: state }))
}

export function presetRecipe(name: string, suite: string): BuildRecipe {
  if (!isPresetName(name))
    throw errors.imageUnknown({
      subject: `preset image "${name}"`,
      problem: `is unknown; presets are ${Object.keys(PRESETS).join(', ')}`,
    })
  const preset = PRESETS[name]
  return {
    kind: 'preset',
    preset: name,
    suite,
    variant: 'extract',
    packages: [...preset.packages].sort(),
    trims: [...TRIMS],
    compilePython: preset.compilePython,
    postStepsVersion: POST_STEPS_VERSION,
    node: preset.node === null ? null : { ...preset.node },
    files: [],
  }
}

/** Debian package names (policy §5.6.1), optionally with an architecture qualifier. */
const PACKAGE_NAME = /^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$/

function validateRecipeFile(file: unknown, index: number): RecipeFile {
  const where = `recipe.files[${index}]`
  if (file === null || typeof file !== 'object')
    throw errors.badArgument({
      subject: `${where}`,
      problem: `must be an object { from, to, mode? }, got ${JSON.stringify(file)}`,
    })
  const { from, to, mode } = file as Record<string, unknown>
  if (typeof from !== 'string' || from === '')
    throw errors.badArgument({ subject: `${where}.from`, problem: `must be a host path, got ${JSON.stringify(from)}` })
  if (
    typeof to !== 'string' ||
    !to.startsWith('/') ||
    to.split('/').includes('..') ||
    path.posix.normalize(to) === '/'
  ) {
    throw errors.badArgument({
      subject: `${where}.to`,
      problem: `must be an absolute path inside the image without "..", got ${JSON.stringify(to)}`,
    })
  }
  if (mode !== undefined && (!Number.isInteger(mode) || (mode as number) < 0 || (mode as number) > 0o7777)) {
    throw errors.badArgument({
      subject: `${where}.mode`,
      problem: `must be an integer permission mode 0..0o7777, got ${JSON.stringify(mode)}`,
    })
  }
  return { from, to: path.posix.normalize(to), mode: mode as number | undefined }
}

/** Checks a user recipe's shape; host files are checked by customRecipe. */
export function validateRecipe(recipe: ImageRecipe): ImageRecipe {
  if (typeof recipe.base !== 'string' || !isPresetName(recipe.base)) {
    throw errors.imageUnknown({
      subject: `recipe base "${String(recipe.base)}"`,
      problem: `is not a preset; use one of ${Object.keys(PRESETS).join(', ')}`,
    })
  }
  const packages = recipe.packages ?? []
  if (!Array.isArray(packages))
    throw errors.badArgument({
      subject: 'recipe.packages',
      problem: `must be an array of Debian package names, got ${JSON.stringify(packages)}`,
    })
  for (const p of packages) {
    if (typeof p !== 'string' || !PACKAGE_NAME.test(p))
      throw errors.badArgument({
        subject: `recipe.packages: ${JSON.stringify(p)}`,
        problem: 'is not a Debian package name',
      })
  }
  const files = recipe.files ?? []
  if (!Array.isArray(files))
    throw errors.badArgument({ subject: 'recipe.files', problem: `must be an array, got ${JSON.stringify(files)}` })
  const extraKeys = Object.keys(recipe).filter((k) => !['base', 'packages', 'files'].includes(k))
  if (extraKeys.length > 0)
    throw errors.badArgument({ subject: `recipe field(s) ${extraKeys.join(', ')}`, problem: 'are unknown' })
  return { base: recipe.base, packages: [...packages], files: files.map(validateRecipeFile) }
}

/** The build recipe of a custom recipe image: the base preset plus packages and files by content. */
export async function customRecipe(recipe: ImageRecipe, suite: string): Promise<BuildRecipe> {
  const valid = validateRecipe(recipe)
  const base = presetRecipe(valid.base, suite)
  const files: BuildRecipe['files'] = []
  for (const file of valid.files ?? []) {
    const stat = await fs.stat(file.from).catch((err: NodeJS.ErrnoException) => err)
    if (stat instanceof Error) {
      if (stat.code === 'ENOENT' || stat.code === 'ENOTDIR')
        throw errors.imageSourceMissing({ source: `recipe file ${file.from}` })
      throw errors.imageSourceUnreadable(
        { subject: `recipe file ${file.from}`, problem: `is unreadable: ${stat.code}` },
        { cause: stat },
      )
    }
    if (!stat.isFile() && !stat.isDirectory())
      throw errors.badArgument({ subject: `recipe file ${file.from}`, problem: 'is neither a file nor a directory' })
    const digest = await summarizeTree(file.from).catch((err: NodeJS.ErrnoException) => {
      throw errors.imageSourceUnreadable(
        { subject: `recipe file ${file.from}`, problem: `is unreadable: ${err.code ?? err.message}` },
        { cause: err },
      )
    })
    files.push({ to: file.to, mode: file.mode ?? null, digest: digest.digest })
  }
  return {
    ...base,
    kind: 'recipe',
    packages: [...new Set([...base.packages, ...(valid.packages ?? [])])].sort(),
    files,
  }
}
