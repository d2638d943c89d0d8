// Bundle the console (src/main.ts → dist/console.js, which the authority compiles into its
// binary). `--check` builds in memory and fails when dist/console.js differs from what the
// source gives (the test command runs it, as it checks the generated stubs); `--test` also
// builds the browser test into dist-test/.
import { build } from "esbuild";
import { readFileSync } from "node:fs";

const check = process.argv.includes("--check");
const result = await build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  format: "iife",
  target: "es2022",
  charset: "utf8",
  legalComments: "none",
  write: !check,
  outfile: "dist/console.js",
  logLevel: "warning",
});
if (check) {
  const built = result.outputFiles[0].text;
  if (built !== readFileSync("dist/console.js", "utf8")) {
    console.error("console/dist/console.js differs from console/src: run `npm run build` in console/ and commit");
    process.exit(1);
  }
  console.log("console bundle matches console/src");
}
if (process.argv.includes("--test")) {
  await build({
    entryPoints: ["test/console.test.ts"],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    outfile: "dist-test/console.test.mjs",
    logLevel: "warning",
  });
}
