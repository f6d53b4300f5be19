// Bitrix24 user field names (§3.2): the physical name `UF_CRM_<digits>` and the universal-CRM REST
// name `ufCrm_<digits>` map one to one; any other shape is refused at startup.
const PHYSICAL = /^UF_CRM_(\d+)$/;

/** `UF_CRM_123` → `ufCrm_123`. Throws on any other shape. */
export function toRestFieldName(physical: string): string {
  const m = PHYSICAL.exec(physical);
  if (!m) throw new Error(`field name must look like UF_CRM_<digits>, got ${JSON.stringify(physical)}`);
  return `ufCrm_${m[1]}`;
}
