// Bundle the console (src/main.ts → dist/console.js, and static/console.css after uPlot's
// stylesheet → dist/console.css, which the authority compiles into its binary). `--check` builds in memory and fails when dist/console.js differs from what the
// source gives (the test command runs it, as it checks the generated stubs); `--test` also
// builds the browser test into dist-test/.
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";

const check = process.argv.includes("--check");
const uplot = JSON.parse(readFileSync("node_modules/uplot/package.json", "utf8")).version;
// The one library bundled in, with its notice (the MIT license asks for it).
const notice = `/* Includes uPlot ${uplot} (https://github.com/leeoniya/uPlot), Copyright (c) 2022 Leon Sorokin, MIT License */`;
const result = await build({
  entryPoints: ["src/main.ts"],
  bundle: true,
  format: "iife",
  target: "es2022",
  charset: "utf8",
  legalComments: "none",
  minify: true,
  banner: { js: notice, css: notice },
  write: !check,
  outfile: "dist/console.js",
  logLevel: "warning",
});
// The stylesheet: uPlot's (the charts need its layout) and then the console's own.
const style =
  notice + "\n" +
  readFileSync("node_modules/uplot/dist/uPlot.min.css", "utf8").trim() +
  "\n\n" +
  readFileSync("static/console.css", "utf8");
if (check) {
  const built = result.outputFiles[0].text;
  if (built !== readFileSync("dist/console.js", "utf8") || style !== readFileSync("dist/console.css", "utf8")) {
    console.error("console/dist differs from console/src and console/static: run `npm run build` in console/ and commit");
    process.exit(1);
  }
  console.log("console bundle matches console/src");
} else {
  writeFileSync("dist/console.css", style);
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
