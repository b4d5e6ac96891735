// The linter: ESLint's and typescript-eslint's recommended rules, plus two type-aware rules on the
// library (a promise nobody awaits is an error no caller can catch). Where a rule is relaxed, the
// comment says why. Line layout is the formatter's job (.prettierrc.json, scripts/format-all.sh).
import js from '@eslint/js'
import globals from 'globals'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  // Generated (scripts/gen-protocol.mjs), built or not TypeScript/JavaScript of ours.
  { ignores: ['node_modules/', 'dist/', 'build/', 'prebuilds/', 'agent/', 'native/', '**/*.gen.ts'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    rules: {
      // Best-effort clean-up (`try { fs.rmSync(…) } catch {}`) is deliberate and common here.
      'no-empty': ['error', { allowEmptyCatch: true }],
      // `let x = default` before a try that may replace it reads better than a bare `let x`.
      'no-useless-assignment': 'off',
      // Layout is prettier's: it may start a line with `[` or `(` that continues the expression above.
      'no-unexpected-multiline': 'off',
      // `const untyped: EventEmitter = this` widens a typed emitter's view; nothing is hidden.
      '@typescript-eslint/no-this-alias': 'off',
      // A leading underscore marks a value taken only to leave it out (`{ _secret, ...rest }`).
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
    },
  },
  {
    // CommonJS fixtures exist to test `require`.
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Tests read JSON documents of many shapes; spelling each one out adds nothing.
    files: ['test/**'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The OCI extractor runs in a worker (or a mapped child process) from its own source text,
    // so it can import no types: modules come through `req` (require) and messages untyped.
    files: ['lib/images/oci/extract-worker.ts', 'lib/images/oci/extract.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // The library runs in someone else's process: a floating promise is a rejection nobody can catch.
    files: ['lib/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
)
