/** Types of scripts/codemods/errors.mjs for the test that drives it. */
export declare function rewrite(
  src: string,
  codeOf: ReadonlyMap<string, string>,
): { text: string; rewritten: number; skipped: string[] }
export declare function codemod(
  libDir: string,
  options?: { dry?: boolean },
): { files: number; rewritten: number; skipped: string[] }
