/** Types of scripts/gen-protocol.mjs for the TypeScript tests that drive it. */
export declare const CONTRACT_PATH: string
/** Every generated file's text, keyed by its path relative to the repository root. */
export declare function generate(
  contract: unknown,
  docs: Record<'PROTOCOL.md' | 'ERRORS.md', string>,
): Record<string, string>
/** The generated files under root that differ from what its contract generates. */
export declare function staleFiles(root?: string): string[]
export declare function readDocs(root?: string): Record<'PROTOCOL.md' | 'ERRORS.md', string>
/** Writes every generated file under root (default: this repository) from its contract; returns the files that changed. */
export declare function writeGenerated(root?: string): string[]
