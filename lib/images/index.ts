/**
 * krunbox images: root filesystems built offline from Debian's archive or pulled from OCI
 * registries into a content-addressed cache. See docs/images.md for the layout, ids and modes.
 */
export { ImageStore } from './store.js'
export type { ImageStoreOptions, BuildOptions, PruneOptions, PullImageOptions } from './store.js'
export type { PullPolicy } from './oci/pull.js'
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
  OciImageRecord,
  ProgressEvent,
  ProgressListener,
  ProgressStage,
  RecipeFile,
  ResolvedImage,
  ResolvedPackage,
} from './types.js'
