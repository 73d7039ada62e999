// Validates prometheus-operator custom resources (ServiceMonitor, PodMonitor, PrometheusRule) against the
// upstream CRD schemas, as compiled in @kubernetes-models/prometheus-operator, and rejects unknown fields
// (the API server's strict field validation) by type-checking each object literal with TypeScript.
// Usage: node crcheck.mjs DOCS.json   (a JSON array of manifests). Prints a JSON array of problems.
import { readFileSync, writeFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = dirname(fileURLToPath(import.meta.url));
const KINDS = ["ServiceMonitor", "PodMonitor", "PrometheusRule"];
const docs = JSON.parse(readFileSync(process.argv[2], "utf8"));
const problems = [];

const lines = [];
for (const [i, doc] of docs.entries()) {
  if (doc.apiVersion !== "monitoring.coreos.com/v1" || !KINDS.includes(doc.kind)) {
    problems.push(`${i}: not a checked kind: ${doc.apiVersion} ${doc.kind}`);
    continue;
  }
  const mod = await import(`@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${doc.kind}`);
  try {
    new mod[doc.kind](doc).validate();
  } catch (e) {
    problems.push(`${doc.kind}/${doc.metadata?.name}: ${e.message}`);
  }
  lines.push(`import type { I${doc.kind} as T${i} } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${doc.kind}";`);
  lines.push(`export const doc${i}: T${i} = ${JSON.stringify(doc)};`);
}

if (lines.length) {
  const file = join(here, `check-${process.pid}.ts`);
  writeFileSync(file, lines.join("\n") + "\n");
  try {
    const program = ts.createProgram([file], {
      noEmit: true, strict: true, skipLibCheck: true,
      module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
    });
    for (const d of ts.getPreEmitDiagnostics(program)) {
      problems.push(`unknown or mistyped field: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
    }
  } finally {
    rmSync(file, { force: true });
  }
}
console.log(JSON.stringify(problems));
