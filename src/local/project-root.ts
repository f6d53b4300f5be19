// The checkout's root folder (two levels above this file): where migrations/, sql/, scripts/ and the
// local state folder are found. A leaf module, so every layer can use it.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const projectRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
