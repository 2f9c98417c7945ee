// Read a Chrome trace-event file with Chrome DevTools' trace engine and print,
// as JSON, what it made of it: per process (by its process_name) and thread,
// the number of slices it parsed, and the trace's bounds in microseconds.
import fs from 'node:fs';
import {analyzeEvents} from '@paulirish/trace_engine/analyze-trace.mjs';

const data = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const {parsedTrace} = await analyzeEvents(data.traceEvents ?? data);
const names = parsedTrace.data.Meta.processNames;
const processes = {};
for (const [pid, p] of parsedTrace.data.Renderer.processes) {
  const label = names.get(pid)?.args?.name ?? String(pid);
  processes[label] = {};
  for (const [tid, t] of p.threads) {
    processes[label][t.name ?? String(tid)] = t.entries.map(e => ({name: e.name, ts: e.ts, dur: e.dur ?? 0}));
  }
}
console.log(JSON.stringify({processes, bounds: parsedTrace.data.Meta.traceBounds}));
