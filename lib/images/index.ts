/**
 * krunbox images: root filesystem directories built offline from Debian's archive into a
 * content-addressed cache. See README.md beside this file for the layout, ids and modes.
 */
export { ImageStore } from './store.js'
export type { ImageStoreOptions, BuildOptions, PruneOptions } from './store.js'
export { PRESETS, DEFAULT_SUITE, POST_STEPS_VERSION, isPresetName } from './presets.js'
export type { PresetName, PresetDefinition } from './presets.js'
export { defaultImageCacheDir } from './layout.js'
export type {
  BuildMode,
  BuildRecipe,
  BuildResult,
  ImageKind,
  ImageListEntry,
  ImageManifest,
  ImageRecipe,
  ImageSource,
  ProgressEvent,
  ProgressListener,
  ProgressStage,
  RecipeFile,
  ResolvedImage,
  ResolvedPackage,
} from './types.js'
