// docs/openapi.json, generated: OpenAPI 3.1 from the operations of src/http/api.ts and zod 4's own
// JSON Schema output (z.toJSONSchema, draft 2020-12, which OpenAPI 3.1 uses as is). Named schemas
// go to components.schemas and are referenced; the rest is inlined. `npm run docs:openapi` writes
// the file; test/unit/http/openapi.test.ts keeps the committed one equal to this.
import { z } from "zod";
import { API_OPERATIONS, type ApiOperation, type ApiResponse, COMMON_RESPONSES } from "./api.js";

type Json = Record<string, unknown>;

/** A schema as JSON Schema, without the document-level keys ($schema, $id). */
function jsonSchema(schema: z.ZodType, io: "input" | "output"): Json {
  const out = z.toJSONSchema(schema, { io, unrepresentable: "throw" }) as Json;
  delete out.$schema;
  delete out.$id;
  return out;
}

export function buildOpenApi(version: string): Json {
  const components: Record<string, Json> = {};
  const named = (name: string, schema: z.ZodType, io: "input" | "output"): Json => {
    const s = jsonSchema(schema, io);
    const prev = components[name];
    if (prev && JSON.stringify(prev) !== JSON.stringify(s)) throw new Error(`two schemas named ${name}`);
    components[name] = s;
    return { $ref: `#/components/schemas/${name}` };
  };

  const response = (r: ApiResponse): Json => {
    const out: Json = {
      description: r.reasons ? `${r.description} Reasons: ${r.reasons.join(", ")}.` : r.description,
    };
    if (r.text) {
      out.content = { [r.text.contentType]: { schema: { type: "string", description: r.text.description } } };
    } else if (r.schema) {
      out.content = {
        "application/json": {
          schema: r.name ? named(r.name, r.schema, "output") : jsonSchema(r.schema, "output"),
        },
      };
    }
    if (r.headers) {
      out.headers = Object.fromEntries(
        Object.entries(r.headers).map(([h, v]) => [h, { schema: { type: "string", const: v } }]),
      );
    }
    if (r.reasons) out["x-bitrix-sync-reasons"] = [...r.reasons];
    return out;
  };

  const operation = (op: ApiOperation): Json => {
    const out: Json = {
      operationId: op.operationId,
      summary: op.summary,
      description: op.description,
      tags: op.tags,
    };
    if (op.query) {
      const q = jsonSchema(op.query, "input");
      const props = (q.properties ?? {}) as Record<string, Json>;
      const required = new Set((q.required ?? []) as string[]);
      out.parameters = Object.entries(props).map(([name, schema]) => {
        const { description, ...rest } = schema;
        return {
          name,
          in: "query",
          required: required.has(name),
          ...(description !== undefined ? { description } : {}),
          schema: rest,
        };
      });
    }
    if (op.form) {
      out.requestBody = {
        required: true,
        description:
          "application/x-www-form-urlencoded with PHP-bracket keys, each at most once, UTF-8, at most 12 fields.",
        content: {
          "application/x-www-form-urlencoded": { schema: named(op.form.name, op.form.schema, "input") },
        },
      };
    }
    if (op.security === "bearer") out.security = [{ serviceToken: [] }];
    const responses: Json = {};
    const all = { ...op.responses, ...COMMON_RESPONSES };
    for (const status of Object.keys(all)
      .map(Number)
      .sort((a, b) => a - b)) {
      responses[String(status)] = response(all[status] as ApiResponse);
    }
    out.responses = responses;
    return out;
  };

  const paths: Record<string, Json> = {};
  for (const op of API_OPERATIONS) {
    paths[op.path] ??= {};
    (paths[op.path] as Json)[op.method] = operation(op);
  }

  return {
    openapi: "3.1.0",
    info: {
      title: "bitrix-sync",
      version,
      description:
        'The HTTP listener of bitrix-sync: health, internal status and metrics on the internal network, and the two Bitrix24 robot receivers, which the public nginx alone exposes (docs/deployment.md). Any other path answers 404 {"error":"not_found"}. Generated from src/http/api.ts by `npm run docs:openapi`; do not edit.',
    },
    servers: [{ url: "http://bitrix-sync:8080", description: "The service on the internal network" }],
    tags: [
      { name: "health", description: "Liveness and readiness (§14)." },
      { name: "internal", description: "Internal network only; never on the public nginx." },
      { name: "receivers", description: "Bitrix24 robot webhooks (§10.1), public through nginx." },
    ],
    paths,
    components: {
      schemas: Object.fromEntries(Object.entries(components).sort(([a], [b]) => a.localeCompare(b))),
      securitySchemes: {
        serviceToken: {
          type: "http",
          scheme: "bearer",
          description: "BITRIX_SYNC_SERVICE_TOKEN (a secret, §12.1).",
        },
      },
    },
  };
}

/** The document as committed: stable key order, two-space indent, a final newline. */
export function openApiText(version: string): string {
  return `${JSON.stringify(buildOpenApi(version), null, 2)}\n`;
}
